//! csi-provisioner storage capacity tracking: the sandbox starts it with `--enable-capacity
//! --capacity-for-immediate-binding` and `NAMESPACE=kube-system`, so the sandbox class gets
//! one CSIStorageCapacity per topology segment. The flow shows those objects, adds a
//! WaitForFirstConsumer class (a second object appears) and removes it again (its object
//! goes), and reads the three `csistoragecapacities_*` gauges.

use std::time::Duration;

use k8s_openapi::api::storage::v1::{CSIStorageCapacity, StorageClass};
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use serde_json::json;

use super::provisioning::ensure_topology;
use super::{FlowResult, failed, metric_value, ms_since, require_sidecar, wait_for};
use crate::sidecars::CAPACITY_NAMESPACE;
use crate::{STORAGE_CLASS, Sandbox};
use testbed_support::http_client;

const PROVISIONER: &str = "csi-provisioner";
/// The late-binding class this flow adds and removes.
const LATE_CLASS: &str = "sandbox-capacity-late";
const WAIT: Duration = Duration::from_secs(30);

/// One line per object: name, class, segment, capacity, maximum volume size.
fn describe(object: &CSIStorageCapacity) -> String {
    let segment = object
        .node_topology
        .as_ref()
        .and_then(|t| t.match_labels.as_ref())
        .map(|labels| {
            labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    format!(
        "{}/{}: class {} segment {{{segment}}} capacity {} maximumVolumeSize {}",
        CAPACITY_NAMESPACE,
        object.metadata.name.as_deref().unwrap_or_default(),
        object.storage_class_name,
        object.capacity.as_ref().map_or("-", |q| q.0.as_str()),
        object
            .maximum_volume_size
            .as_ref()
            .map_or("-", |q| q.0.as_str()),
    )
}

/// The objects of `class`, once there are `count` of them.
async fn objects_of(
    api: &Api<CSIStorageCapacity>,
    class: &str,
    count: usize,
) -> Result<Vec<CSIStorageCapacity>, super::FlowError> {
    wait_for(
        &format!("{count} CSIStorageCapacity object(s) for class {class}"),
        WAIT,
        || async {
            let objects: Vec<_> = api
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .filter(|o| o.storage_class_name == class)
                .collect();
            (objects.len() == count).then_some(objects)
        },
    )
    .await
}

/// Shows the capacity objects and follows a class coming and going.
pub(super) async fn tracked(sb: &Sandbox) -> FlowResult {
    let addr = require_sidecar(sb, PROVISIONER)?;
    let mut notes = Vec::new();
    notes.extend(ensure_topology(sb).await?);
    let api: Api<CSIStorageCapacity> = Api::namespaced(sb.client().clone(), CAPACITY_NAMESPACE);

    for object in objects_of(&api, STORAGE_CLASS, 1).await? {
        notes.push(describe(&object));
    }

    let classes: Api<StorageClass> = Api::all(sb.client().clone());
    let late: StorageClass = serde_json::from_value(json!({
        "metadata": {"name": LATE_CLASS},
        "provisioner": sb.driver_name(),
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "WaitForFirstConsumer",
    }))
    .map_err(|e| failed("bad class", e))?;
    let start = tokio::time::Instant::now();
    classes
        .create(&PostParams::default(), &late)
        .await
        .map_err(|e| failed("cannot create the class", e))?;
    let added = objects_of(&api, LATE_CLASS, 1).await?;
    notes.push(format!(
        "class {LATE_CLASS} added: {} after {} ms",
        describe(&added[0]),
        ms_since(start)
    ));
    let start = tokio::time::Instant::now();
    classes
        .delete(LATE_CLASS, &DeleteParams::default())
        .await
        .map_err(|e| failed("cannot delete the class", e))?;
    objects_of(&api, LATE_CLASS, 0).await?;
    notes.push(format!(
        "class {LATE_CLASS} deleted: its object is gone after {} ms",
        ms_since(start)
    ));

    let gauges = wait_for("the capacity gauges", WAIT, || async {
        let body = http_client::get(addr, "/metrics", Duration::from_secs(5))
            .await
            .ok()?
            .body;
        let value = |name| metric_value(&body, name, &[]);
        let gauges = (
            value("csistoragecapacities_desired_goal")?,
            value("csistoragecapacities_desired_current")?,
            value("csistoragecapacities_obsolete")?,
        );
        ((gauges.0 - gauges.1).abs() < 0.5 && gauges.2 < 0.5).then_some(gauges)
    })
    .await?;
    notes.push(format!(
        "gauges: csistoragecapacities_desired_goal {} desired_current {} obsolete {}",
        gauges.0, gauges.1, gauges.2
    ));
    Ok(notes)
}
