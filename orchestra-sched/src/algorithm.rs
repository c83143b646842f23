//! One scheduling decision, without any I/O: PreFilter, Filter over (a
//! percentage of) the nodes in parallel, PreScore, Score, normalise, weigh,
//! pick the best node.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;

use crate::framework::{Code, CycleState, NodeScore, Status};
use crate::node_info::{NodeInfo, PodInfo};
use crate::profile::Profile;
use crate::snapshot::Snapshot;

/// Fewest feasible nodes searched for before scoring.
pub const MIN_FEASIBLE_NODES_TO_FIND: usize = 100;
/// Lowest adaptive percentage.
pub const MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND: usize = 5;

/// How many feasible nodes to find out of `num_all` before scoring, for a
/// configured `percentage` (None or 0: adaptive, 50% minus 1% per 125 nodes,
/// at least 5%, at least 100 nodes).
pub fn num_feasible_nodes_to_find(percentage: Option<i32>, num_all: usize) -> usize {
    if num_all < MIN_FEASIBLE_NODES_TO_FIND {
        return num_all;
    }
    let mut adaptive = percentage.unwrap_or(0).max(0) as usize;
    if adaptive >= 100 {
        return num_all;
    }
    if adaptive == 0 {
        adaptive = 50usize.saturating_sub(num_all / 125).max(MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND);
    }
    (num_all * adaptive / 100).max(MIN_FEASIBLE_NODES_TO_FIND)
}

/// Why no node fits.
#[derive(Debug, Clone, Default)]
pub struct FitError {
    /// Nodes in the snapshot.
    pub num_all_nodes: usize,
    /// The rejecting status per node.
    pub statuses: HashMap<String, Status>,
    /// A PreFilter rejection (applies to every node).
    pub pre_filter: Option<Status>,
    /// Plugins that rejected the pod (for queueing hints).
    pub unschedulable_plugins: HashSet<&'static str>,
    /// What PostFilter (preemption) said, appended to the message.
    pub post_filter_message: Option<String>,
}

impl FitError {
    /// Upstream's message: `0/5 nodes are available: 3 Insufficient cpu, 2
    /// node(s) had untolerated taint {k: v}.` (reasons counted and sorted).
    pub fn message(&self) -> String {
        // A PreFilter rejection applies to every node: its reasons are given
        // once, uncounted, as upstream does.
        if let Some(s) = &self.pre_filter {
            let mut msg = format!("0/{} nodes are available: {}.", self.num_all_nodes, s.message());
            if let Some(p) = &self.post_filter_message {
                msg.push(' ');
                msg.push_str(p);
            }
            return msg;
        }
        let mut histogram: BTreeMap<String, usize> = BTreeMap::new();
        for s in self.statuses.values() {
            for r in &s.reasons {
                *histogram.entry(r.clone()).or_default() += 1;
            }
        }
        let mut reasons: Vec<String> = histogram.into_iter().map(|(r, n)| format!("{n} {r}")).collect();
        reasons.sort();
        let mut msg = format!("0/{} nodes are available: {}.", self.num_all_nodes, reasons.join(", "));
        if let Some(p) = &self.post_filter_message {
            msg.push(' ');
            msg.push_str(p);
        }
        msg
    }
}

/// The outcome of one decision.
#[derive(Debug)]
pub enum Decision {
    /// The chosen node.
    Fit {
        /// Its name.
        node: String,
        /// Nodes filtered.
        evaluated: usize,
        /// Feasible nodes found.
        feasible: usize,
    },
    /// No node fits.
    Unfit(FitError),
    /// A plugin failed.
    Error(Status),
}

/// Options of the algorithm.
///
/// Built from [`Default`] and the `with_*` setters, so that a new setting is
/// not a breaking change:
///
/// ```
/// use orchestra_sched::algorithm::AlgorithmOptions;
///
/// let options = AlgorithmOptions::default().with_percentage_of_nodes_to_score(50).with_parallelism(4);
/// assert_eq!(options.percentage_of_nodes_to_score, Some(50));
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct AlgorithmOptions {
    /// Scheduler-wide percentage of nodes to score (None: adaptive).
    pub percentage_of_nodes_to_score: Option<i32>,
    /// Threads used for filtering and scoring.
    pub parallelism: usize,
}

impl Default for AlgorithmOptions {
    fn default() -> Self {
        AlgorithmOptions { percentage_of_nodes_to_score: None, parallelism: 2 }
    }
}

impl AlgorithmOptions {
    /// Sets [`percentage_of_nodes_to_score`](Self::percentage_of_nodes_to_score)
    /// (`None`: adaptive).
    pub fn with_percentage_of_nodes_to_score(mut self, percentage: impl Into<Option<i32>>) -> Self {
        self.percentage_of_nodes_to_score = percentage.into();
        self
    }

    /// Sets [`parallelism`](Self::parallelism).
    pub fn with_parallelism(mut self, parallelism: usize) -> Self {
        self.parallelism = parallelism;
        self
    }
}

/// The first this many items run on the calling thread; threads are started
/// only for what remains after them (starting threads costs more than
/// filtering a few hundred nodes, and the cores are shared with the rest of
/// the control plane).
const PARALLEL_THRESHOLD: usize = 1024;

/// Runs `work(from, to)` over `0..n` in chunks on up to `threads` threads;
/// `work` returns false to stop early.
fn parallelize(threads: usize, n: usize, chunk: usize, work: &(dyn Fn(usize, usize) -> bool + Sync)) {
    let sequential = n.min(PARALLEL_THRESHOLD);
    let mut from = 0;
    while from < sequential {
        let to = (from + chunk).min(sequential);
        if !work(from, to) {
            return;
        }
        from = to;
    }
    if from >= n {
        return;
    }
    let next = AtomicUsize::new(from);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let run = || {
        loop {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let start = next.fetch_add(chunk, Ordering::Relaxed);
            if start >= n {
                break;
            }
            if !work(start, (start + chunk).min(n)) {
                stop.store(true, Ordering::Relaxed);
            }
        }
    };
    if threads <= 1 {
        run();
        return;
    }
    std::thread::scope(|s| {
        for _ in 1..threads {
            s.spawn(run);
        }
        run();
    });
}

/// Runs `filters` on `node`, leaving room for the pods nominated to it that
/// `pod` must not take it from: with those pods added the node must pass,
/// and without them too (upstream runs both, as a nominated pod may be what
/// satisfies an affinity term).
fn filter_node(
    filters: &[&Arc<dyn crate::framework::Filter>],
    state: &CycleState,
    pod: &PodInfo,
    node: &Arc<NodeInfo>,
    snapshot: &Snapshot,
) -> Status {
    let nominated =
        if snapshot.nominated.is_empty() { Vec::new() } else { snapshot.nominated_before(node.name(), pod) };
    if nominated.is_empty() {
        return Profile::run_active_filters(filters, state, pod, node);
    }
    let mut with = NodeInfo::clone(node);
    for p in nominated {
        with.add_pod(p);
    }
    let s = Profile::run_active_filters(filters, state, pod, &with);
    if !s.is_success() {
        return s;
    }
    Profile::run_active_filters(filters, state, pod, node)
}

/// The decision algorithm with its round-robin start index.
#[derive(Debug, Default)]
pub struct Algorithm {
    /// Options.
    pub options: AlgorithmOptions,
    next_start_node_index: usize,
    rng: u64,
}

impl Algorithm {
    /// An algorithm with `options`.
    pub fn new(options: AlgorithmOptions) -> Algorithm {
        Algorithm { options, next_start_node_index: 0, rng: 0x9E37_79B9_7F4A_7C15 }
    }

    fn random(&mut self) -> u64 {
        // xorshift64*
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Runs PreFilter and Filter; the feasible nodes, or why none.
    // The error is the cycle's outcome, made once per cycle: boxing it buys nothing.
    #[allow(clippy::result_large_err)]
    pub fn find_nodes_that_fit(
        &mut self,
        profile: &Profile,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> Result<(Vec<Arc<NodeInfo>>, usize), Decision> {
        if state.snapshot().is_none() {
            state.set_snapshot(snapshot.clone());
        }
        let mut allowed: Option<HashSet<String>> = None;
        let mut fit = FitError { num_all_nodes: snapshot.len(), ..Default::default() };
        for p in &profile.pre_filter {
            let (result, status) = p.pre_filter(state, pod, snapshot);
            match status.code {
                Code::Success => {}
                Code::Skip => {
                    state.skip_filter.insert(p.name());
                }
                Code::Error => return Err(Decision::Error(status.with_plugin(p.name()))),
                _ => {
                    fit.unschedulable_plugins.insert(p.name());
                    fit.pre_filter = Some(status.with_plugin(p.name()));
                    return Err(Decision::Unfit(fit));
                }
            }
            if let Some(names) = result {
                allowed = Some(match allowed {
                    None => names,
                    Some(prev) => prev.intersection(&names).cloned().collect(),
                });
            }
        }
        let candidates: Vec<Arc<NodeInfo>>;
        let nodes: &[Arc<NodeInfo>] = match &allowed {
            Some(names) => {
                candidates = names.iter().filter_map(|n| snapshot.get(n).cloned()).collect();
                &candidates
            }
            None => &snapshot.nodes[..],
        };
        let n = nodes.len();
        if n == 0 {
            if allowed.is_some() {
                fit.pre_filter = Some(Status::unresolvable("node(s) didn't satisfy plugin(s) [PreFilter]"));
            }
            return Err(Decision::Unfit(fit));
        }
        let to_find = if allowed.is_some() {
            n
        } else {
            num_feasible_nodes_to_find(
                profile.percentage_of_nodes_to_score.or(self.options.percentage_of_nodes_to_score),
                n,
            )
        };
        let state_ref: &CycleState = state;
        let filters = profile.active_filters(state_ref);
        // A pod nominated by an earlier preemption tries its node first.
        if let Some(node) = snapshot.nominated_node_of(pod).and_then(|name| snapshot.get(name))
            && allowed.as_ref().is_none_or(|names| names.contains(node.name()))
            && filter_node(&filters, state_ref, pod, node, snapshot).is_success()
        {
            return Ok((vec![node.clone()], 1));
        }
        let start = if allowed.is_some() { 0 } else { self.next_start_node_index % n };
        let found = AtomicUsize::new(0);
        let feasible: Mutex<Vec<(usize, Arc<NodeInfo>)>> = Mutex::new(Vec::with_capacity(to_find));
        let failed: Mutex<Vec<(usize, Status)>> = Mutex::new(Vec::new());
        let processed = AtomicUsize::new(0);
        parallelize(self.options.parallelism, n, 64, &|from, to| {
            let mut ok = Vec::with_capacity((to - from).min(to_find));
            let mut bad = Vec::new();
            for i in from..to {
                if found.load(Ordering::Relaxed) >= to_find {
                    break;
                }
                let node = &nodes[(start + i) % n];
                let s = filter_node(&filters, state_ref, pod, node, snapshot);
                if s.is_success() {
                    ok.push((i, node.clone()));
                    found.fetch_add(1, Ordering::Relaxed);
                } else {
                    bad.push((i, s));
                }
            }
            processed.fetch_max(to, Ordering::Relaxed);
            if !ok.is_empty() {
                feasible.lock().extend(ok);
            }
            if !bad.is_empty() {
                failed.lock().extend(bad);
            }
            found.load(Ordering::Relaxed) < to_find
        });
        let mut feasible = feasible.into_inner();
        feasible.sort_by_key(|(i, _)| *i);
        feasible.truncate(to_find);
        let evaluated = if feasible.len() >= to_find { feasible.last().map_or(n, |(i, _)| i + 1) } else { n };
        if allowed.is_none() {
            self.next_start_node_index = (start + evaluated) % n;
        }
        if feasible.is_empty() {
            for (i, s) in failed.into_inner() {
                fit.unschedulable_plugins.insert(s.plugin);
                fit.statuses.insert(nodes[(start + i) % n].name().to_owned(), s);
            }
            return Err(Decision::Unfit(fit));
        }
        Ok((feasible.into_iter().map(|(_, n)| n).collect(), evaluated))
    }

    /// Runs PreScore and Score over `nodes`; weighted totals in `nodes` order.
    pub fn prioritize(
        &mut self,
        profile: &Profile,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> Result<Vec<i64>, Status> {
        for p in &profile.pre_score {
            let s = p.pre_score(state, pod, nodes);
            match s.code {
                Code::Success => {}
                Code::Skip => {
                    state.skip_score.insert(p.name());
                }
                _ => return Err(s.with_plugin(p.name())),
            }
        }
        let mut totals = vec![0i64; nodes.len()];
        let state_ref: &CycleState = state;
        // One list of node scores for every plugin in turn (names made once).
        let mut reused: Vec<NodeScore> =
            nodes.iter().map(|n| NodeScore { name: n.shared_name.clone(), score: 0 }).collect();
        for (plugin, weight) in &profile.score {
            if state_ref.skip_score.contains(plugin.name()) {
                continue;
            }
            let scores: Mutex<Vec<NodeScore>> = Mutex::new(std::mem::take(&mut reused));
            let error: Mutex<Option<Status>> = Mutex::new(None);
            parallelize(self.options.parallelism, nodes.len(), 128, &|from, to| {
                let mut local = Vec::with_capacity(to - from);
                for node in &nodes[from..to] {
                    match plugin.score(state_ref, pod, node) {
                        Ok(v) => local.push(v),
                        Err(s) => {
                            *error.lock() = Some(s.with_plugin(plugin.name()));
                            return false;
                        }
                    }
                }
                let mut all = scores.lock();
                for (k, v) in local.into_iter().enumerate() {
                    all[from + k].score = v;
                }
                true
            });
            if let Some(e) = error.into_inner() {
                return Err(e);
            }
            let mut scores = scores.into_inner();
            let s = plugin.normalize(state_ref, pod, &mut scores);
            if !s.is_success() {
                return Err(s.with_plugin(plugin.name()));
            }
            for (t, s) in totals.iter_mut().zip(&scores) {
                *t += s.score * weight;
            }
            reused = scores;
        }
        Ok(totals)
    }

    /// Decides where `pod` goes.
    pub fn schedule(
        &mut self,
        profile: &Profile,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> Decision {
        if snapshot.is_empty() {
            return Decision::Unfit(FitError { num_all_nodes: 0, ..Default::default() });
        }
        let (feasible, evaluated) = match self.find_nodes_that_fit(profile, state, pod, snapshot) {
            Ok(x) => x,
            Err(d) => return d,
        };
        if feasible.len() == 1 {
            return Decision::Fit { node: feasible[0].name().to_owned(), evaluated, feasible: 1 };
        }
        let totals = match self.prioritize(profile, state, pod, &feasible) {
            Ok(t) => t,
            Err(s) => return Decision::Error(s),
        };
        // Highest total; ties broken uniformly at random (reservoir sampling).
        let mut best = 0;
        let mut ties = 0u64;
        for (i, t) in totals.iter().enumerate() {
            if *t > totals[best] {
                best = i;
                ties = 1;
            } else if *t == totals[best] {
                ties += 1;
                if self.random().is_multiple_of(ties) {
                    best = i;
                }
            }
        }
        Decision::Fit { node: feasible[best].name().to_owned(), evaluated, feasible: feasible.len() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{NodeBuilder, PodBuilder, node_info, pod_info};

    #[test]
    fn feasible_nodes_to_find() {
        for (pct, all, want) in [
            (None, 50, 50),
            (None, 1000, 420),
            (None, 5000, 500),
            (None, 6000, 300),
            (Some(100), 5000, 5000),
            (Some(1), 5000, 100),
            (Some(30), 1000, 300),
        ] {
            assert_eq!(num_feasible_nodes_to_find(pct, all), want, "{pct:?} {all}");
        }
    }

    /// Room made by preemption stays for the nominated pod: pods of lower
    /// priority do not take it, pods of higher priority may, and the
    /// nominated pod tries its node first.
    #[test]
    fn nominated_pods_keep_their_room() {
        let profile = Profile::default_profile();
        let cache = crate::cache::Cache::new();
        cache.upsert_node(Arc::new(NodeBuilder::new("free").cpu("2").memory("8Gi").build()));
        cache.upsert_node(Arc::new(NodeBuilder::new("full").cpu("2").memory("8Gi").build()));
        cache.add_pod(Arc::new(pod_info(PodBuilder::new("busy").uid("busy").cpu("2").build())), "full");
        let nominated = Arc::new(pod_info(PodBuilder::new("big").uid("big").cpu("2").priority(10).build()));
        cache.nominate(nominated.clone(), "free");
        let mut alg = Algorithm::new(AlgorithmOptions::default());
        let mut decide = |pod: &PodInfo| alg.schedule(&profile, &mut CycleState::new(), pod, &cache.snapshot());
        let low = pod_info(PodBuilder::new("low").uid("low").cpu("1").priority(1).build());
        assert!(matches!(decide(&low), Decision::Unfit(_)), "a lower-priority pod leaves the room alone");
        let high = pod_info(PodBuilder::new("high").uid("high").cpu("1").priority(20).build());
        assert!(matches!(decide(&high), Decision::Fit { ref node, .. } if node == "free"));
        match decide(&nominated) {
            Decision::Fit { node, evaluated, .. } => assert_eq!((node.as_str(), evaluated), ("free", 1)),
            other => panic!("{other:?}"),
        }
        // Once it is placed, the room is an ordinary one.
        cache.assume(nominated, "free");
        assert!(cache.snapshot().nominated.is_empty());
    }

    #[test]
    fn message_like_upstream() {
        let profile = Profile::default_profile();
        let mut nodes = Vec::new();
        for i in 0..3 {
            nodes.push(node_info(NodeBuilder::new(&format!("small{i}")).cpu("1").memory("1Gi").build(), vec![]));
        }
        for i in 0..2 {
            nodes.push(node_info(
                NodeBuilder::new(&format!("tainted{i}"))
                    .cpu("8")
                    .memory("8Gi")
                    .taint("dedicated", "gpu", "NoSchedule")
                    .build(),
                vec![],
            ));
        }
        let snapshot = Snapshot::from_nodes(nodes);
        let pod = pod_info(PodBuilder::new("p").cpu("2").build());
        let mut alg = Algorithm::new(AlgorithmOptions::default());
        match alg.schedule(&profile, &mut CycleState::new(), &pod, &snapshot) {
            Decision::Unfit(e) => assert_eq!(
                e.message(),
                "0/5 nodes are available: 2 node(s) had untolerated taint {dedicated: gpu}, 3 Insufficient cpu."
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn spreads_by_least_allocated() {
        let profile = Profile::default_profile();
        let nodes = vec![
            node_info(
                NodeBuilder::new("busy").cpu("4").memory("8Gi").build(),
                vec![PodBuilder::new("x").cpu("3").memory("1Gi").node("busy").build()],
            ),
            node_info(NodeBuilder::new("idle").cpu("4").memory("8Gi").build(), vec![]),
        ];
        let snapshot = Snapshot::from_nodes(nodes);
        let pod = pod_info(PodBuilder::new("p").cpu("500m").memory("500Mi").build());
        let mut alg = Algorithm::new(AlgorithmOptions::default());
        match alg.schedule(&profile, &mut CycleState::new(), &pod, &snapshot) {
            Decision::Fit { node, .. } => assert_eq!(node, "idle"),
            other => panic!("{other:?}"),
        }
    }
}
