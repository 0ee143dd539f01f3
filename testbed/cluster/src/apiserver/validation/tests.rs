//! Table tests of the validation messages against what kube-apiserver v1.36.2 answered in the
//! golden fixtures (h1, h2, l4, m7, m9) and upstream's wording for the rest.

use serde_json::{Value, json};

use super::field::{ErrorType, FieldError};
use super::metadata::validate_metadata_update;
use super::names::dns1123_subdomain_errors;
use super::{validate_object, validate_update};
use crate::apiserver::resources::{self, ResourceInfo};

fn info(group: &str, plural: &str) -> &'static ResourceInfo {
    resources::find(group, "v1", plural).unwrap()
}

fn messages(errors: &[FieldError]) -> Vec<String> {
    errors.iter().map(ToString::to_string).collect()
}

fn pvc(name: &str, spec: &Value) -> Value {
    json!({"metadata": {"name": name, "namespace": "ns"}, "spec": spec})
}

#[test]
fn object_names_must_be_dns_subdomains() {
    let cases = [
        ("fx-list-a", true),
        ("a.b.c", true),
        ("FX_Invalid", false),
        ("-a", false),
        ("a-", false),
        ("a..b", false),
    ];
    for (name, ok) in cases {
        assert_eq!(dns1123_subdomain_errors(name).is_empty(), ok, "{name}");
    }
    assert_eq!(
        dns1123_subdomain_errors(&"a".repeat(254)),
        vec!["must be no more than 253 characters".to_owned()]
    );
}

#[test]
fn an_invalid_pvc_name_gets_the_upstream_message() {
    let errs = validate_object(
        info("", "persistentvolumeclaims"),
        &pvc(
            "FX_Invalid",
            &json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}),
        ),
    );
    assert_eq!(messages(&errs), vec![
        "metadata.name: Invalid value: \"FX_Invalid\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".to_owned()
    ]);
    assert_eq!(errs[0].cause()["reason"], "FieldValueInvalid");
}

#[test]
fn pvc_spec_errors_are_reported_one_cause_each() {
    let errs = validate_object(
        info("", "persistentvolumeclaims"),
        &pvc(
            "x",
            &json!({"resources": {"requests": {"storage": "-1Gi"}}}),
        ),
    );
    assert_eq!(
        messages(&errs),
        vec![
            "spec.accessModes: Required value: at least 1 access mode is required".to_owned(),
            "spec.resources[storage]: Invalid value: \"-1Gi\": must be greater than zero"
                .to_owned(),
        ]
    );
    assert_eq!(
        errs[0].cause(),
        json!({"reason": "FieldValueRequired", "message": "Required value: at least 1 access mode is required", "field": "spec.accessModes"})
    );
}

#[test]
fn a_generate_name_prefix_is_checked_with_its_trailing_dash_masked() {
    let i = info("", "persistentvolumeclaims");
    let ok = json!({"metadata": {"name": "csisc-abcde", "generateName": "csisc-"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}});
    assert!(validate_object(i, &ok).is_empty());
    let bad = json!({"metadata": {"name": "FX_4n5zs", "generateName": "FX_"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}});
    let fields: Vec<String> = validate_object(i, &bad)
        .into_iter()
        .map(|e| e.field)
        .collect();
    assert_eq!(fields, vec!["metadata.generateName", "metadata.name"]);
}

#[test]
fn required_fields_of_the_kinds_sidecars_write() {
    let cases: Vec<(&str, &str, Value, Vec<&str>)> = vec![
        (
            "",
            "persistentvolumes",
            json!({"metadata": {"name": "pv"}, "spec": {}}),
            vec![
                "spec.accessModes: Required value: at least 1 access mode is required",
                "spec.capacity: Required value",
                "spec: Required value: must specify a volume type",
            ],
        ),
        (
            "",
            "persistentvolumes",
            json!({"metadata": {"name": "pv"}, "spec": {"accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"}, "csi": {"driver": "d"}}}),
            vec!["spec.csi.volumeHandle: Required value"],
        ),
        (
            "",
            "persistentvolumes",
            json!({"metadata": {"name": "pv"}, "spec": {"accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"}, "csi": {"driver": "d", "volumeHandle": "v"},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "topology.example.com/zone", "operator": "In", "values": ["a"]},
                    {"key": "a/b/c", "operator": "In", "values": ["a"]}]}]}}}}),
            vec![
                "spec.nodeAffinity.required.nodeSelectorTerms[0].matchExpressions[1].key: Invalid value: \"a/b/c\": a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
            ],
        ),
        (
            "storage.k8s.io",
            "volumeattachments",
            json!({"metadata": {"name": "va"}, "spec": {"source": {}}}),
            vec![
                "spec.attacher: Required value",
                "spec.nodeName: Required value",
                "spec.source: Required value: must specify exactly one of inlineVolumeSpec and persistentVolumeName",
            ],
        ),
        (
            "storage.k8s.io",
            "volumeattachments",
            json!({"metadata": {"name": "va"}, "spec": {"attacher": "d", "nodeName": "n", "source": {"persistentVolumeName": "pv"}},
                   "status": {"attached": true, "attachmentMetadata": {"k": "v".repeat(256 * 1024 - 1)},
                              "attachError": {"message": "a".repeat(1024)}}}),
            vec![],
        ),
        (
            "storage.k8s.io",
            "volumeattachments",
            json!({"metadata": {"name": "va"}, "spec": {"attacher": "d", "nodeName": "n", "source": {"persistentVolumeName": "pv"}},
                   "status": {"attached": true, "attachmentMetadata": {"k": "v".repeat(256 * 1024)},
                              "attachError": {"message": "a".repeat(1025)}, "detachError": {"message": "a".repeat(1025)}}}),
            vec![
                "status.attachmentMetadata: Too long: may not be more than 262144 bytes",
                "status.attachError.message: Too long: may not be more than 1024 bytes",
                "status.detachError.message: Too long: may not be more than 1024 bytes",
            ],
        ),
        (
            "coordination.k8s.io",
            "leases",
            json!({"metadata": {"name": "l", "namespace": "ns"}, "spec": {"holderIdentity": "vm", "leaseDurationSeconds": 15}}),
            vec![],
        ),
        (
            "coordination.k8s.io",
            "leases",
            json!({"metadata": {"name": "l", "namespace": "ns"}, "spec": {"leaseDurationSeconds": 0}}),
            vec!["spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0"],
        ),
        (
            "storage.k8s.io",
            "storageclasses",
            json!({"metadata": {"name": "sc"}}),
            vec!["provisioner: Required value"],
        ),
        (
            "storage.k8s.io",
            "csistoragecapacities",
            json!({"metadata": {"name": "c", "namespace": "ns"}}),
            vec!["storageClassName: Required value"],
        ),
        (
            "storage.k8s.io",
            "csistoragecapacities",
            json!({"metadata": {"name": "c", "namespace": "ns"}, "storageClassName": "sc", "capacity": "-1Gi", "maximumVolumeSize": "-1"}),
            vec!["capacity: Invalid value: \"-1Gi\": must be greater than or equal to 0"],
        ),
        ("", "pvc-none", json!({}), vec![]),
    ];
    for (group, plural, obj, want) in cases {
        let Some(i) = resources::find(group, "v1", plural) else {
            continue;
        };
        assert_eq!(messages(&validate_object(i, &obj)), want, "{plural}");
    }
}

#[test]
fn events_are_validated_in_their_own_api_version() {
    let core = info("", "events");
    let info_type = json!({"metadata": {"name": "e", "namespace": "fixtures"}, "involvedObject": {"namespace": "fixtures"}, "type": "Info"});
    assert!(
        validate_object(core, &info_type).is_empty(),
        "core/v1 accepts any type (m8)"
    );
    let mismatch = json!({"metadata": {"name": "e", "namespace": "fixtures"}, "involvedObject": {"namespace": "default"}});
    assert_eq!(
        messages(&validate_object(core, &mismatch)),
        vec![
            "involvedObject.namespace: Invalid value: \"default\": does not match event.namespace"
        ]
    );
    let v1 = resources::find("events.k8s.io", "v1", "events").unwrap();
    let no_time = json!({"metadata": {"name": "e", "namespace": "fixtures"}, "reason": "X"});
    assert_eq!(
        messages(&validate_object(v1, &no_time)),
        vec!["eventTime: Required value"]
    );
}

#[test]
fn finalizers_must_be_qualified_and_cannot_be_added_while_deleting() {
    let i = info("", "persistentvolumeclaims");
    let obj = pvc(
        "x",
        &json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}),
    );
    let mut bad = obj.clone();
    bad["metadata"]["finalizers"] = json!(["nope"]);
    assert_eq!(
        messages(&validate_object(i, &bad)),
        vec![
            "metadata.finalizers[0]: Invalid value: \"nope\": name is neither a standard finalizer name nor is it fully qualified"
        ]
    );
    let mut old = obj.clone();
    old["metadata"]["deletionTimestamp"] = json!("2026-11-21T15:40:29Z");
    old["metadata"]["finalizers"] = json!(["a/b"]);
    let mut new = old.clone();
    new["metadata"]["finalizers"] = json!(["a/b", "c/d"]);
    assert_eq!(
        messages(&validate_metadata_update(&old, &new)),
        vec![
            "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{\"c/d\"}"
        ]
    );
    new["metadata"]["finalizers"] = json!([]);
    assert!(validate_metadata_update(&old, &new).is_empty());
}

#[test]
fn labels_keys_and_values_are_checked() {
    let i = info("", "persistentvolumeclaims");
    let mut obj = pvc(
        "x",
        &json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}),
    );
    obj["metadata"]["labels"] = json!({"example.com/ok": "yes", "bad key": "v", "k": "bad value"});
    let fields: Vec<String> = validate_object(i, &obj)
        .into_iter()
        .map(|e| format!("{}={}", e.field, e.value.unwrap_or_default()))
        .collect();
    assert_eq!(
        fields,
        vec![
            "metadata.labels=\"bad key\"",
            "metadata.labels=\"bad value\""
        ]
    );
}

#[test]
fn pvc_spec_is_immutable_except_requests_and_a_first_volume_name() {
    let i = info("", "persistentvolumeclaims");
    let old = pvc(
        "x",
        &json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}, "volumeMode": "Filesystem"}),
    );
    let mut grow = old.clone();
    grow["spec"]["resources"]["requests"]["storage"] = json!("2Gi");
    grow["spec"]["volumeName"] = json!("pv-1");
    assert!(validate_update(i, &old, &grow).is_empty());
    let mut mode = old.clone();
    mode["spec"]["volumeMode"] = json!("Block");
    assert_eq!(
        validate_update(i, &old, &mode)[0].kind,
        ErrorType::Forbidden
    );
}

#[test]
fn a_pvc_request_may_drop_for_recovery_but_not_to_status_capacity() {
    let i = info("", "persistentvolumeclaims");
    let mut old = pvc(
        "x",
        &json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}, "volumeName": "pv-1"}),
    );
    old["status"] = json!({"phase": "Bound", "capacity": {"storage": "1Gi"}});
    let request = |size: &str| {
        let mut new = old.clone();
        new["spec"]["resources"]["requests"]["storage"] = json!(size);
        new
    };
    assert!(validate_update(i, &old, &request("2Gi")).is_empty());
    assert!(validate_update(i, &old, &request("20Gi")).is_empty());
    for size in ["1Gi", "512Mi"] {
        assert_eq!(
            messages(&validate_update(i, &old, &request(size))),
            vec![
                "spec.resources.requests.storage: Forbidden: field can not be less than status.capacity"
            ],
            "{size}"
        );
    }
}

#[test]
fn pvc_allocated_resources_and_statuses_take_only_storage_and_known_values() {
    let i = info("", "persistentvolumeclaims");
    let old = pvc(
        "x",
        &json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "2Gi"}}}),
    );
    let with_status = |status: Value| {
        let mut new = old.clone();
        new["status"] = status;
        new
    };
    let ok = with_status(json!({
        "allocatedResources": {"storage": "2Gi"},
        "allocatedResourceStatuses": {"storage": "ControllerResizeInProgress"},
    }));
    assert!(validate_update(i, &old, &ok).is_empty());
    let bad = with_status(json!({
        "allocatedResources": {"storage": "-1", "cpu": "1"},
        "allocatedResourceStatuses": {"storage": "Resizing", "memory": "NodeResizePending"},
    }));
    assert_eq!(
        messages(&validate_update(i, &old, &bad)),
        vec![
            "status.allocatedResources[cpu]: Unsupported value: \"cpu\": supported values: \"storage\"",
            "status.allocatedResources[storage]: Invalid value: \"-1\": must be greater than or equal to 0",
            "status.allocatedResourceStatuses[memory]: Unsupported value: \"memory\": supported values: \"storage\"",
            "status.allocatedResourceStatuses[storage]: Unsupported value: \"Resizing\": supported values: \"ControllerResizeInProgress\", \"ControllerResizeInfeasible\", \"NodeResizeInProgress\", \"NodeResizeInfeasible\", \"NodeResizePending\"",
        ]
    );
}

#[test]
fn a_volume_attributes_class_needs_a_driver_and_never_changes_it_or_its_parameters() {
    let i = info("storage.k8s.io", "volumeattributesclasses");
    let class = |driver: &str, parameters: Value| json!({"metadata": {"name": "gold"}, "driverName": driver, "parameters": parameters});
    let gold = class("hostpath.csi.k8s.io", json!({"iops": "3000"}));
    assert!(validate_object(i, &gold).is_empty());
    assert_eq!(
        messages(&validate_object(i, &class("", json!({"iops": "3000"})))),
        vec!["driverName: Required value"]
    );
    assert!(validate_update(i, &gold, &gold).is_empty());
    assert_eq!(
        messages(&validate_update(
            i,
            &gold,
            &class("other.csi.k8s.io", json!({"iops": "4000"}))
        )),
        vec![
            "driverName: Forbidden: updates to driverName are forbidden.",
            "parameters: Forbidden: updates to parameters are forbidden.",
        ]
    );
}

#[test]
fn a_claims_class_cannot_be_cleared_once_applied_and_its_modify_status_is_checked() {
    let i = info("", "persistentvolumeclaims");
    let spec = |class: Value| {
        json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
               "volumeName": "pv-1", "volumeAttributesClassName": class})
    };
    assert_eq!(
        messages(&validate_object(i, &pvc("x", &spec(json!("Not_A_Name"))))),
        vec![
            "spec.volumeAttributesClassName: Invalid value: \"Not_A_Name\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
        ]
    );
    let old = pvc("x", &spec(json!("gold")));
    // Never applied: the user may cancel with nil or "".
    for cleared in [Value::Null, json!("")] {
        assert!(validate_update(i, &old, &pvc("x", &spec(cleared))).is_empty());
    }
    let mut applied = old.clone();
    applied["status"] = json!({"currentVolumeAttributesClassName": "gold"});
    let mut to_nil = pvc("x", &spec(Value::Null));
    to_nil["status"] = applied["status"].clone();
    let mut to_empty = pvc("x", &spec(json!("")));
    to_empty["status"] = applied["status"].clone();
    assert_eq!(
        messages(&validate_update(i, &applied, &to_nil)),
        vec![
            "spec.volumeAttributesClassName: Forbidden: update to nil is forbidden when status.currentVolumeAttributesClassName is not nil"
        ]
    );
    assert_eq!(
        messages(&validate_update(i, &applied, &to_empty)),
        vec![
            "spec.volumeAttributesClassName: Forbidden: update to empty string is forbidden when status.currentVolumeAttributesClassName is not nil"
        ]
    );
    let mut silver = pvc("x", &spec(json!("silver")));
    silver["status"] = applied["status"].clone();
    assert!(validate_update(i, &applied, &silver).is_empty());

    let mut status = old.clone();
    status["status"] = json!({"modifyVolumeStatus": {"status": "InProgress", "targetVolumeAttributesClassName": "gold"}});
    assert!(validate_update(i, &old, &status).is_empty());
    status["status"]["modifyVolumeStatus"]["status"] = json!("Done");
    assert_eq!(
        messages(&validate_update(i, &old, &status)),
        vec![
            "status.modifyVolumeStatus.status: Unsupported value: \"Done\": supported values: \"InProgress\", \"Infeasible\", \"Pending\""
        ]
    );

    let pv = info("", "persistentvolumes");
    let volume = |class: Value| json!({"metadata": {"name": "pv-1"}, "spec": {"volumeAttributesClassName": class}});
    assert!(validate_update(pv, &volume(Value::Null), &volume(json!("gold"))).is_empty());
    assert_eq!(
        messages(&validate_update(
            pv,
            &volume(json!("gold")),
            &volume(Value::Null)
        )),
        vec![
            "spec.volumeAttributesClassName: Forbidden: update from non-nil value to nil is forbidden"
        ]
    );
}
