//! NodePorts: the host ports a pod asks for must be free on the node.

use std::sync::Arc;

use crate::framework::*;
use crate::node_info::{NodeInfo, PodInfo};
use crate::registry::{NoArgs, PluginError, PluginSet};

/// The plugin's name.
pub const NAME: &str = "NodePorts";
/// Upstream's reason.
pub const ERR_REASON: &str = "node(s) didn't have free ports for the requested pod ports";

/// The plugin.
#[derive(Debug, Default)]
pub struct NodePorts;

impl Plugin for NodePorts {
    fn name(&self) -> &'static str {
        NAME
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![
            ClusterEvent::new(EventResource::AssignedPod, action::DELETE),
            ClusterEvent::new(EventResource::Node, action::ADD),
        ]
    }
}

impl PreFilter for NodePorts {
    fn pre_filter(
        &self,
        _: &mut CycleState,
        pod: &PodInfo,
        _: &crate::snapshot::Snapshot,
    ) -> (PreFilterResult, Status) {
        if pod.host_ports.is_empty() { (None, Status::skip()) } else { (None, Status::success()) }
    }
}

impl Filter for NodePorts {
    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if pod.host_ports.iter().any(|p| node.port_conflicts(p)) {
            Status::unschedulable(ERR_REASON)
        } else {
            Status::success()
        }
    }
}

/// The plugin's arguments: it has no options.
pub type Args = NoArgs;

/// Builds the plugin, as registered under [`NAME`].
pub fn new(_: Args, _: &Handle) -> Result<PluginSet, PluginError> {
    let p = Arc::new(NodePorts);
    Ok(PluginSet::new(&p).pre_filter(&p).filter(&p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{NodeBuilder, PodBuilder, node_info, pod_info};

    #[test]
    fn table() {
        let cases = [
            ("free", vec![], 80, true),
            ("other port used", vec![PodBuilder::new("o").host_port(8080).build()], 80, true),
            ("same port used", vec![PodBuilder::new("o").host_port(80).build()], 80, false),
        ];
        for (name, pods, port, want) in cases {
            let n = node_info(NodeBuilder::new("n").build(), pods);
            let s = NodePorts.filter(&CycleState::new(), &pod_info(PodBuilder::new("p").host_port(port).build()), &n);
            assert_eq!(s.is_success(), want, "{name}");
        }
    }

    /// A pod `name` asking for host `port` on `ip` over `protocol` (None: unset, the API defaults).
    fn port_pod(name: &str, ip: Option<&str>, protocol: Option<&str>, port: i32) -> PodBuilder {
        PodBuilder::new(name).with(|p| {
            p.spec.as_mut().unwrap().containers[0].ports = Some(vec![k8s_openapi::api::core::v1::ContainerPort {
                container_port: port,
                host_port: Some(port),
                host_ip: ip.map(Into::into),
                protocol: protocol.map(Into::into),
                ..Default::default()
            }]);
        })
    }

    #[test]
    fn host_ip_and_protocol_table() {
        type Port = (Option<&'static str>, Option<&'static str>, i32);
        let any = Some("0.0.0.0");
        let ip1 = Some("10.0.0.1");
        let ip2 = Some("10.0.0.2");
        let (tcp, udp, sctp) = (Some("TCP"), Some("UDP"), Some("SCTP"));
        let cases: [(&str, Port, Port, bool); 14] = [
            // hostIP: 0.0.0.0 (or unset) binds every IP of the node.
            ("0.0.0.0 used, specific IP wanted", (any, tcp, 80), (ip1, tcp, 80), false),
            ("specific IP used, 0.0.0.0 wanted", (ip1, tcp, 80), (any, tcp, 80), false),
            ("unset IP used, specific IP wanted", (None, tcp, 80), (ip1, tcp, 80), false),
            ("specific IP used, unset IP wanted", (ip1, tcp, 80), (None, tcp, 80), false),
            ("same specific IP", (ip1, tcp, 80), (ip1, tcp, 80), false),
            ("different specific IPs", (ip1, tcp, 80), (ip2, tcp, 80), true),
            ("different specific IPs, other port", (ip1, tcp, 80), (ip2, tcp, 81), true),
            ("0.0.0.0 both", (any, tcp, 80), (any, tcp, 80), false),
            // protocol: a port is taken per protocol.
            ("TCP used, UDP wanted", (any, tcp, 53), (any, udp, 53), true),
            ("UDP used, TCP wanted", (any, udp, 53), (any, tcp, 53), true),
            ("UDP used, UDP wanted", (any, udp, 53), (any, udp, 53), false),
            ("UDP on 0.0.0.0 used, UDP on an IP wanted", (any, udp, 53), (ip1, udp, 53), false),
            ("SCTP used, TCP wanted", (ip1, sctp, 80), (ip1, tcp, 80), true),
            ("unset protocol is TCP", (any, None, 80), (any, tcp, 80), false),
        ];
        for (name, (uip, uproto, uport), (wip, wproto, wport), want) in cases {
            let n = node_info(NodeBuilder::new("n").build(), vec![port_pod("o", uip, uproto, uport).build()]);
            let pod = pod_info(port_pod("p", wip, wproto, wport).build());
            let s = NodePorts.filter(&CycleState::new(), &pod, &n);
            assert_eq!(s.is_success(), want, "{name}");
            if !want {
                assert_eq!(s.reasons, [ERR_REASON], "{name}");
            }
        }
    }
}
