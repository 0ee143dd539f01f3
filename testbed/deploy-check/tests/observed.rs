//! deploy/ against what the binaries really do. One sandbox run (every sidecar binary with
//! leader election, as deployed, against the in-memory API server and the mock driver, through
//! the sandbox's flows) gives:
//!
//! - the requests each sidecar sent, by User-Agent (the API server's audit view): the RBAC in
//!   each sidecar's base must grant exactly those, apart from the [`Allowance`]s below;
//! - each sidecar's `/metrics`: every metric the dashboard's PromQL reads must be exposed.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failed setup step should panic"
)]

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;
use testbed_deploy_check::rbac::{self, Allowance, Triple};
use testbed_deploy_check::render::{self, of_kind};
use testbed_deploy_check::{promql, workspace_root};
use testbed_sandbox::report::Outcome;
use testbed_sandbox::{Options, Sandbox, flows};
use testbed_support::http_client;

/// The flows that run; the last of `flows::all()` restarts the driver, which makes every
/// sidecar exit (upstream's behaviour), so it is left out to scrape the live processes.
const SKIPPED_FLOW: &str = "driver restart -> probe 500 then 200";

/// Permissions granted though the sandbox's flows do not send them: either features other
/// tests exercise (each sidecar's own whole-binary tests, or features being added in parallel)
/// or verbs upstream's manifests grant that a drop-in must keep.
const PROVISIONER_ALLOWED: &[Allowance] = &[
    Allowance {
        group: "",
        resource: "secrets",
        verbs: &["get"],
        reason: "only for StorageClasses with provisioner secrets (provisioner tests: secrets)",
    },
    Allowance {
        group: "",
        resource: "persistentvolumeclaims",
        verbs: &["update"],
        reason: "only to drop selected-node when a topology-aware create must reschedule",
    },
    EVENTS_UPSTREAM,
    Allowance {
        group: "",
        resource: "nodes",
        verbs: &["get", "list", "watch"],
        reason: "topology: drivers with VOLUME_ACCESSIBILITY_CONSTRAINTS (the mock has none)",
    },
    Allowance {
        group: "storage.k8s.io",
        resource: "csinodes",
        verbs: &["get", "list", "watch"],
        reason: "topology: drivers with VOLUME_ACCESSIBILITY_CONSTRAINTS (the mock has none)",
    },
    Allowance {
        group: "snapshot.storage.k8s.io",
        resource: "volumesnapshots",
        verbs: &["get", "list", "watch", "update"],
        reason: "used by features exercised elsewhere: snapshot data sources",
    },
    Allowance {
        group: "snapshot.storage.k8s.io",
        resource: "volumesnapshotcontents",
        verbs: &["get", "list"],
        reason: "used by features exercised elsewhere: snapshot data sources",
    },
    Allowance {
        group: "gateway.networking.k8s.io",
        resource: "referencegrants",
        verbs: &["get", "list", "watch"],
        reason: "used by features exercised elsewhere: cross-namespace data sources",
    },
    Allowance {
        group: "storage.k8s.io",
        resource: "volumeattributesclasses",
        verbs: &["get"],
        reason: "used by features exercised elsewhere: VolumeAttributesClass at create",
    },
    Allowance {
        group: "storage.k8s.io",
        resource: "csistoragecapacities",
        verbs: &[
            "get", "list", "watch", "create", "update", "patch", "delete",
        ],
        reason: "used by features exercised elsewhere: capacity tracking (--enable-capacity)",
    },
    Allowance {
        group: "",
        resource: "pods",
        verbs: &["get"],
        reason: "used by features exercised elsewhere: capacity owner walk",
    },
    Allowance {
        group: "apps",
        resource: "replicasets",
        verbs: &["get"],
        reason: "used by features exercised elsewhere: capacity owner walk",
    },
    LEASE_DELETE,
    upstream_get("", "persistentvolumeclaims"),
    upstream_get("", "persistentvolumes"),
    upstream_get("storage.k8s.io", "storageclasses"),
    upstream_get("storage.k8s.io", "volumeattachments"),
    list_fallback("", "persistentvolumeclaims"),
    list_fallback("", "persistentvolumes"),
    list_fallback("storage.k8s.io", "storageclasses"),
    list_fallback("storage.k8s.io", "volumeattachments"),
];

const ATTACHER_ALLOWED: &[Allowance] = &[
    Allowance {
        group: "",
        resource: "secrets",
        verbs: &["get"],
        reason: "only for PVs with controllerPublishSecretRef (attacher tests: secrets)",
    },
    EVENTS_PATCH,
    LEASE_DELETE,
    upstream_get("", "persistentvolumes"),
    upstream_get("storage.k8s.io", "csinodes"),
    upstream_get("storage.k8s.io", "volumeattachments"),
    list_fallback("", "persistentvolumes"),
    list_fallback("storage.k8s.io", "csinodes"),
    list_fallback("storage.k8s.io", "volumeattachments"),
];

const RESIZER_ALLOWED: &[Allowance] = &[
    Allowance {
        group: "",
        resource: "secrets",
        verbs: &["get"],
        reason: "only for PVs with expand / modify secrets (resizer tests: secrets)",
    },
    Allowance {
        group: "",
        resource: "pods",
        verbs: &["list", "watch"],
        reason: "only while a claim waits for its pods to go (--handle-volume-inuse-error)",
    },
    EVENTS_UPSTREAM,
    EVENTS_PATCH,
    LEASE_DELETE,
    upstream_get("", "persistentvolumeclaims"),
    upstream_get("", "persistentvolumes"),
    upstream_get("storage.k8s.io", "volumeattributesclasses"),
    list_fallback("", "persistentvolumeclaims"),
    list_fallback("", "persistentvolumes"),
    list_fallback("storage.k8s.io", "volumeattributesclasses"),
];

/// Events verbs upstream's ClusterRoles grant that an event recorder does not send.
const EVENTS_UPSTREAM: Allowance = Allowance {
    group: "",
    resource: "events",
    verbs: &["list", "watch", "update"],
    reason: "upstream grants them; client-go's recorder only creates and patches",
};

/// A repeated Event is patched (count, lastTimestamp) by the correlator; the flows record
/// each event once (csi-common's events tests exercise the patch).
const EVENTS_PATCH: Allowance = Allowance {
    group: "",
    resource: "events",
    verbs: &["patch"],
    reason: "used by features exercised elsewhere: repeated events (csi_common::events tests)",
};

/// `get` on a watched resource: the Rust sidecars read these objects from their watch caches
/// only, upstream's rules grant `get` too. Kept so the ClusterRole stays upstream's: Go and
/// Rust replicas share it while they run side by side (docs/install.md).
const fn upstream_get(group: &'static str, resource: &'static str) -> Allowance {
    Allowance {
        group,
        resource,
        verbs: &["get"],
        reason: "upstream grants get; shared with Go replicas during a side-by-side rollout",
    }
}

/// `list` on a cached resource: the informers start with one streaming-list watch
/// (`sendInitialEvents=true`, which kube-apiserver authorizes as `watch`), and LIST only when the
/// server refuses it (WatchList off, kube-apiserver before 1.27), as client-go does; the fake
/// serves streaming lists, so the flows never LIST these.
const fn list_fallback(group: &'static str, resource: &'static str) -> Allowance {
    Allowance {
        group,
        resource,
        verbs: &["list"],
        reason: "LIST when the API server refuses a streaming list (csi_common::informer)",
    }
}

/// Every sidecar's Lease rule is upstream's; the verbs the election loop does not send are kept
/// so the Roles stay byte-compatible with upstream's (an operator may share them).
const LEASE_DELETE: Allowance = Allowance {
    group: "coordination.k8s.io",
    resource: "leases",
    verbs: &["list", "watch", "delete"],
    reason: "upstream's Role grants them; the election loop only gets, creates and updates",
};

/// The permissions the Roles and ClusterRoles of deploy/<base> grant.
fn granted_by(base: &str) -> BTreeSet<Triple> {
    let objects = render::kustomize(&workspace_root().join("deploy").join(base)).unwrap();
    ["Role", "ClusterRole"]
        .into_iter()
        .flat_map(|kind| of_kind(&objects, kind))
        .flat_map(rbac::granted)
        .collect()
}

/// Every metric family name in a Prometheus text exposition, histogram series included
/// (`x_bucket`, `x_sum`, `x_count`).
fn exposed_names(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect()
}

/// Every `expr` of the dashboard's panels.
fn dashboard_exprs(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                match (key.as_str(), v) {
                    ("expr", Value::String(expr)) => out.push(expr.clone()),
                    _ => dashboard_exprs(v, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| dashboard_exprs(v, out)),
        _ => {}
    }
}

fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbac_grants_what_the_binaries_send_and_the_dashboard_reads_what_they_expose() {
    let work = tempfile::tempdir().unwrap();
    let mut options = Options::new(bin_dir());
    options.kubeconfig_out = work.path().join("kubeconfig");
    options.work_dir = Some(work.path().join("work"));
    options.claims = 2;
    options.leader_election = true;
    let sandbox = Sandbox::start(options).await.unwrap();
    let flows: Vec<_> = flows::all()
        .into_iter()
        .filter(|f| f.name != SKIPPED_FLOW)
        .collect();
    let reports = sandbox.run_flows(&flows).await;
    for report in &reports {
        assert!(
            matches!(report.outcome, Outcome::Passed),
            "flow {:?} did not pass: {:?} (logs in {})",
            report.name,
            report.notes,
            work.path().display()
        );
    }

    // RBAC, per sidecar.
    let requests = sandbox.api_server().requests();
    let mut problems = Vec::new();
    for (binary, base, allowed) in [
        ("csi-provisioner", "provisioner", PROVISIONER_ALLOWED),
        ("csi-attacher", "attacher", ATTACHER_ALLOWED),
        ("csi-resizer", "resizer", RESIZER_ALLOWED),
    ] {
        let used: BTreeSet<Triple> = requests
            .by_client(binary)
            .into_iter()
            .map(|p| (p.group, p.resource, p.verb))
            .collect();
        assert!(!used.is_empty(), "{binary} sent no request at all");
        let difference = rbac::compare(&granted_by(base), &used, allowed);
        if !difference.is_empty() {
            problems.push(format!(
                "{binary}: not granted {:?}; granted but never used {:?}",
                difference.missing, difference.unused
            ));
        }
    }
    // The node sidecars need no RBAC: they never call the API server.
    for binary in ["csi-node-driver-registrar", "livenessprobe"] {
        assert_eq!(requests.by_client(binary), BTreeSet::new(), "{binary}");
    }
    assert_eq!(problems, Vec::<String>::new());

    // The dashboard's metric names, against what the sidecars expose.
    let mut exposed = BTreeSet::new();
    for binary in ["csi-provisioner", "csi-attacher", "csi-resizer"] {
        let endpoint = sandbox.sidecar_endpoint(binary).unwrap();
        let response = http_client::get(endpoint, "/metrics", Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(response.status, 200, "{binary}");
        exposed.extend(exposed_names(&response.body));
    }
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(workspace_root().join("deploy/dashboards/csi-sidecars.json"))
            .unwrap(),
    )
    .unwrap();
    let mut exprs = Vec::new();
    dashboard_exprs(&dashboard, &mut exprs);
    let read: BTreeSet<String> = exprs.iter().flat_map(|e| promql::metric_names(e)).collect();
    let unknown: Vec<_> = read.difference(&exposed).collect();
    assert_eq!(unknown, Vec::<&String>::new(), "exposed: {exposed:?}");
    for family in [
        "csi_sidecar_operations_seconds_count",
        "csi_sidecar_operations_seconds_bucket",
        "workqueue_depth",
        "workqueue_longest_running_processor_seconds",
        "leader_election_master_status",
    ] {
        assert!(
            read.contains(family),
            "the dashboard does not show {family}"
        );
    }
    sandbox.shutdown().await;
}
