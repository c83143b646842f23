//! Printers of `apps/v1` and `batch/v1`.

use serde_json::Value;

use super::format::{
    age, array_at, containers, format_label_selector, format_labels, human_duration, int_at, name, parse_time,
    seconds_between, since, str_at,
};
use super::{ColumnDefinition as Col, FnPrinter, Timestamp};

/// The printer of an apps or batch kind.
pub(super) fn printer(kind: &str) -> Option<FnPrinter> {
    let (columns, cells): (super::ColumnsFn, super::CellsFn) = match kind {
        "Deployment" => (deployment_columns, deployment_cells),
        "ReplicaSet" => (replica_set_columns, replica_set_cells),
        "StatefulSet" => (stateful_set_columns, stateful_set_cells),
        "DaemonSet" => (daemon_set_columns, daemon_set_cells),
        "ControllerRevision" => (revision_columns, revision_cells),
        "Job" => (job_columns, job_cells),
        "CronJob" => (cron_job_columns, cron_job_cells),
        _ => return None,
    };
    Some(FnPrinter { columns, cells, conditions: None })
}

fn containers_col() -> Col {
    Col::new("Containers", "string", "Names of each container in the template.").priority(1)
}

fn images_col() -> Col {
    Col::new("Images", "string", "Images referenced by each container in the template.").priority(1)
}

fn selector_col(description: &str) -> Col {
    Col::new("Selector", "string", description).priority(1)
}

/// `spec.replicas`, which defaults to 1.
fn desired(object: &Value) -> i64 {
    object.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1)
}

fn deployment_columns() -> Vec<Col> {
    vec![
        Col::name_column(),
        Col::new("Ready", "string", "Number of the pod with ready state"),
        Col::new(
            "Up-to-date",
            "string",
            "Total number of non-terminated pods targeted by this deployment that have the desired template spec.",
        ),
        Col::new(
            "Available",
            "string",
            "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.",
        ),
        Col::age_column(),
        containers_col(),
        images_col(),
        selector_col(
            "Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the ones affected by this deployment.",
        ),
    ]
}

fn deployment_cells(d: &Value, now: Timestamp) -> Vec<Value> {
    let (names, images) = containers(d.pointer("/spec/template/spec"));
    vec![
        name(d).into(),
        format!("{}/{}", int_at(d, "/status/readyReplicas"), desired(d)).into(),
        int_at(d, "/status/updatedReplicas").into(),
        int_at(d, "/status/availableReplicas").into(),
        age(d, now).into(),
        names.into(),
        images.into(),
        format_label_selector(d.pointer("/spec/selector")).into(),
    ]
}

fn replica_set_columns() -> Vec<Col> {
    vec![
        Col::name_column(),
        Col::new("Desired", "integer", "Replicas is the number of desired replicas."),
        Col::new("Current", "integer", "Replicas is the most recently observed number of replicas."),
        Col::new("Ready", "integer", "The number of ready replicas for this replica set."),
        Col::age_column(),
        containers_col(),
        images_col(),
        selector_col("Selector is a label query over pods that should match the replica count."),
    ]
}

fn replica_set_cells(rs: &Value, now: Timestamp) -> Vec<Value> {
    let (names, images) = containers(rs.pointer("/spec/template/spec"));
    vec![
        name(rs).into(),
        desired(rs).into(),
        int_at(rs, "/status/replicas").into(),
        int_at(rs, "/status/readyReplicas").into(),
        age(rs, now).into(),
        names.into(),
        images.into(),
        format_label_selector(rs.pointer("/spec/selector")).into(),
    ]
}

fn stateful_set_columns() -> Vec<Col> {
    vec![
        Col::name_column(),
        Col::new("Ready", "string", "Number of the pod with ready state"),
        Col::age_column(),
        containers_col(),
        images_col(),
    ]
}

fn stateful_set_cells(sts: &Value, now: Timestamp) -> Vec<Value> {
    let (names, images) = containers(sts.pointer("/spec/template/spec"));
    vec![
        name(sts).into(),
        format!("{}/{}", int_at(sts, "/status/readyReplicas"), desired(sts)).into(),
        age(sts, now).into(),
        names.into(),
        images.into(),
    ]
}

fn daemon_set_columns() -> Vec<Col> {
    vec![
        Col::name_column(),
        Col::new(
            "Desired",
            "integer",
            "The total number of nodes that should be running the daemon pod (including nodes correctly running the daemon pod).",
        ),
        Col::new(
            "Current",
            "integer",
            "The number of nodes that are running at least 1 daemon pod and are supposed to run the daemon pod.",
        ),
        Col::new(
            "Ready",
            "integer",
            "numberReady is the number of nodes that should be running the daemon pod and have one or more of the daemon pod running with a Ready Condition.",
        ),
        Col::new("Up-to-date", "integer", "The total number of nodes that are running updated daemon pod"),
        Col::new(
            "Available",
            "integer",
            "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and available (ready for at least spec.minReadySeconds)",
        ),
        Col::new(
            "Node Selector",
            "string",
            "NodeSelector is a selector which must be true for the pod to fit on a node.",
        ),
        Col::age_column(),
        containers_col(),
        images_col(),
        selector_col("A label query over pods that are managed by the daemon set."),
    ]
}

fn daemon_set_cells(ds: &Value, now: Timestamp) -> Vec<Value> {
    let (names, images) = containers(ds.pointer("/spec/template/spec"));
    vec![
        name(ds).into(),
        int_at(ds, "/status/desiredNumberScheduled").into(),
        int_at(ds, "/status/currentNumberScheduled").into(),
        int_at(ds, "/status/numberReady").into(),
        int_at(ds, "/status/updatedNumberScheduled").into(),
        int_at(ds, "/status/numberAvailable").into(),
        format_labels(ds.pointer("/spec/template/spec/nodeSelector")).into(),
        age(ds, now).into(),
        names.into(),
        images.into(),
        format_label_selector(ds.pointer("/spec/selector")).into(),
    ]
}

fn revision_columns() -> Vec<Col> {
    vec![
        Col::name_column(),
        Col::new("Controller", "string", "Controller of the object"),
        Col::new("Revision", "string", "Revision indicates the revision of the state represented by Data."),
        Col::age_column(),
    ]
}

fn revision_cells(rev: &Value, now: Timestamp) -> Vec<Value> {
    let controller = array_at(rev, "/metadata/ownerReferences")
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
        .map(|r| {
            let group = str_at(r, "/apiVersion").rsplit_once('/').map(|(g, _)| g).unwrap_or("");
            let kind = str_at(r, "/kind");
            let group_kind = if group.is_empty() { kind.to_owned() } else { format!("{kind}.{group}") };
            format!("{}/{}", group_kind.to_ascii_lowercase(), str_at(r, "/name"))
        })
        .unwrap_or_else(|| "<none>".into());
    vec![name(rev).into(), controller.into(), int_at(rev, "/revision").into(), age(rev, now).into()]
}

fn job_columns() -> Vec<Col> {
    vec![
        Col::name_column(),
        Col::new("Status", "string", "Status of the job."),
        Col::new("Completions", "string", "The number of pods which reached phase Succeeded."),
        Col::new("Duration", "string", "Time required to complete the job."),
        Col::age_column(),
        containers_col(),
        images_col(),
        selector_col("A label query over pods that should match the pod count."),
    ]
}

/// The status of the first job condition of `type_` is True.
fn job_condition(job: &Value, type_: &str) -> bool {
    array_at(job, "/status/conditions")
        .iter()
        .find(|c| str_at(c, "/type") == type_)
        .is_some_and(|c| str_at(c, "/status") == "True")
}

/// The Status cell of a job.
pub(crate) fn job_status(job: &Value) -> &'static str {
    if job_condition(job, "Complete") {
        "Complete"
    } else if job_condition(job, "Failed") {
        "Failed"
    } else if job.pointer("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null()) {
        "Terminating"
    } else if job_condition(job, "Suspended") {
        "Suspended"
    } else if job_condition(job, "FailureTarget") {
        "FailureTarget"
    } else {
        "Running"
    }
}

/// The Completions cell of a job: `1/3`, `0/1 of 4` (parallel), `0/1`.
pub(crate) fn job_completions(job: &Value) -> String {
    let succeeded = int_at(job, "/status/succeeded");
    match job.pointer("/spec/completions").and_then(Value::as_i64) {
        Some(completions) => format!("{succeeded}/{completions}"),
        None => match int_at(job, "/spec/parallelism") {
            p if p > 1 => format!("{succeeded}/1 of {p}"),
            _ => format!("{succeeded}/1"),
        },
    }
}

fn job_cells(job: &Value, now: Timestamp) -> Vec<Value> {
    let start = job.pointer("/status/startTime").and_then(parse_time);
    let end = job.pointer("/status/completionTime").and_then(parse_time);
    let duration = match (start, end) {
        (None, _) => String::new(),
        (Some(start), None) => human_duration(seconds_between(start, now)),
        (Some(start), Some(end)) => human_duration(seconds_between(start, end)),
    };
    let (names, images) = containers(job.pointer("/spec/template/spec"));
    vec![
        name(job).into(),
        job_status(job).into(),
        job_completions(job).into(),
        duration.into(),
        age(job, now).into(),
        names.into(),
        images.into(),
        format_label_selector(job.pointer("/spec/selector")).into(),
    ]
}

fn cron_job_columns() -> Vec<Col> {
    vec![
        Col::name_column(),
        Col::new("Schedule", "string", "The schedule in Cron format, see https://en.wikipedia.org/wiki/Cron."),
        Col::new(
            "Timezone",
            "string",
            "The time zone name for the given schedule, see https://en.wikipedia.org/wiki/List_of_tz_database_time_zones.",
        ),
        Col::new(
            "Suspend",
            "boolean",
            "This flag tells the controller to suspend subsequent executions, it does not apply to already started executions.",
        ),
        Col::new("Active", "integer", "A list of pointers to currently running jobs."),
        Col::new("Last Schedule", "string", "Information when was the last time the job was successfully scheduled."),
        Col::age_column(),
        containers_col(),
        images_col(),
        selector_col("A label query over pods that should match the pod count."),
    ]
}

fn cron_job_cells(cj: &Value, now: Timestamp) -> Vec<Value> {
    let suspend = match cj.pointer("/spec/suspend").and_then(Value::as_bool) {
        Some(true) => "True",
        Some(false) => "False",
        None => "<unset>",
    };
    let last = match cj.pointer("/status/lastScheduleTime").filter(|v| !v.is_null()) {
        Some(t) => since(Some(t), now),
        None => "<none>".into(),
    };
    let timezone = match str_at(cj, "/spec/timeZone") {
        "" => "<none>",
        tz => tz,
    };
    let template = cj.pointer("/spec/jobTemplate/spec");
    let (names, images) = containers(template.and_then(|t| t.pointer("/template/spec")));
    vec![
        name(cj).into(),
        str_at(cj, "/spec/schedule").into(),
        timezone.into(),
        suspend.into(),
        array_at(cj, "/status/active").len().into(),
        last.into(),
        age(cj, now).into(),
        names.into(),
        images.into(),
        format_label_selector(template.and_then(|t| t.get("selector"))).into(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn now() -> Timestamp {
        "2024-06-01T12:00:00Z".parse().unwrap()
    }

    #[test]
    fn deployment_and_stateful_set_cells() {
        let d = json!({"metadata": {"name": "web", "creationTimestamp": "2024-06-01T11:00:00Z"},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}, "template": {"spec": {"containers": [{"name": "c", "image": "nginx"}, {"name": "s", "image": "envoy"}]}}},
            "status": {"readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2}});
        assert_eq!(
            deployment_cells(&d, now()),
            json!(["web", "2/3", 3, 2, "60m", "c,s", "nginx,envoy", "app=web"]).as_array().unwrap().clone()
        );
        let sts = json!({"metadata": {"name": "db"}, "spec": {}});
        assert_eq!(stateful_set_cells(&sts, now())[1], "0/1");
    }

    #[test]
    fn job_statuses_and_completions() {
        let job = |spec: Value, status: Value| json!({"metadata": {"name": "j"}, "spec": spec, "status": status});
        let cases = [
            (json!({"completions": 3}), json!({"succeeded": 1}), "Running", "1/3"),
            (json!({"parallelism": 4}), json!({}), "Running", "0/1 of 4"),
            (
                json!({}),
                json!({"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}),
                "Complete",
                "1/1",
            ),
            (json!({}), json!({"conditions": [{"type": "Failed", "status": "True"}]}), "Failed", "0/1"),
            (json!({}), json!({"conditions": [{"type": "Suspended", "status": "True"}]}), "Suspended", "0/1"),
            (json!({}), json!({"conditions": [{"type": "Complete", "status": "False"}]}), "Running", "0/1"),
        ];
        for (spec, status, expected_status, expected_completions) in cases {
            let j = job(spec, status);
            assert_eq!((job_status(&j), job_completions(&j).as_str()), (expected_status, expected_completions));
        }
        let finished =
            job(json!({}), json!({"startTime": "2024-06-01T11:00:00Z", "completionTime": "2024-06-01T11:02:30Z"}));
        assert_eq!(job_cells(&finished, now())[3], "2m30s");
        let running = job(json!({}), json!({"startTime": "2024-06-01T11:59:00Z"}));
        assert_eq!(job_cells(&running, now())[3], "60s");
        assert_eq!(job_cells(&job(json!({}), json!({})), now())[3], "");
    }

    #[test]
    fn cron_jobs_and_revisions() {
        let cj = json!({"metadata": {"name": "c"}, "spec": {"schedule": "*/5 * * * *", "suspend": false}, "status": {"active": [{}], "lastScheduleTime": "2024-06-01T11:55:00Z"}});
        assert_eq!(
            cron_job_cells(&cj, now())[1..6],
            [json!("*/5 * * * *"), json!("<none>"), json!("False"), json!(1), json!("5m")]
        );
        let rev = json!({"metadata": {"name": "web-1", "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "controller": true}]}, "revision": 2});
        assert_eq!(revision_cells(&rev, now())[1..3], [json!("statefulset.apps/web"), json!(2)]);
    }
}
