//! PATCH semantics of the in-memory API server, checked against the golden fixtures captured
//! from kube-apiserver v1.36.2 (`http/i*` and the sidecar requests in
//! `traffic/go-sidecar-requests.txt`).
//!
//! The objects below are the fixture watch states with `managedFields` removed (the patch
//! functions never touch it) and, for the "after" states, with the resourceVersion the patch
//! result carries: the stored one, or the one the patch body sets. Bumping the resourceVersion
//! and filling server defaults is the caller's job, so those are not part of the result here.

use serde_json::{Value, json};
use testbed_cluster::apiserver::patch::{PatchError, PatchType, apply};

fn parse(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|err| panic!("test object is not valid JSON: {err}"))
}

fn merge(target: &str, body: &str) -> Result<Value, PatchError> {
    apply(PatchType::Merge, "Unused", &parse(target), body.as_bytes())
}

fn json_patch(target: &str, body: &str) -> Result<Value, PatchError> {
    apply(PatchType::Json, "Unused", &parse(target), body.as_bytes())
}

fn strategic(kind: &str, target: &Value, body: &str) -> Result<Value, PatchError> {
    apply(PatchType::StrategicMerge, kind, target, body.as_bytes())
}

fn invalid<T>(result: &Result<T, PatchError>) -> bool {
    matches!(result, Err(PatchError::Invalid(_)))
}

// ---------------------------------------------------------------------------------------------
// JSON merge patch

#[test]
fn merge_patch_adds_a_label_and_an_annotation_like_fixture_i1() {
    let body = r#"{"metadata":{"labels":{"merge":"yes"},"annotations":{"fixtures.example.com/note":"merge-patch"}}}"#;
    assert_eq!(merge(PVC_LIST_A_478, body), Ok(parse(PVC_LIST_A_566)));
}

#[test]
fn merge_patch_replaces_the_whole_finalizer_list_like_fixture_i6() {
    let body = r#"{"metadata":{"finalizers":["fixtures.example.com/other"]}}"#;
    let mut expected = parse(PV_STATIC_570);
    expected["metadata"]["finalizers"] = json!(["fixtures.example.com/other"]);
    assert_eq!(merge(PV_STATIC_570, body), Ok(expected));
}

#[test]
fn merge_patch_keeps_the_resource_version_of_the_body_for_the_caller_to_check() {
    // Fixture i10: the server answers 409 because "1" is stale; the patch result carries "1".
    let body = r#"{"metadata":{"resourceVersion":"1","labels":{"x":"y"}}}"#;
    let result = merge(PVC_LIST_A_568_BEFORE_I13, body).unwrap();
    assert_eq!(result["metadata"]["resourceVersion"], "1");
    assert_eq!(result["metadata"]["labels"]["x"], "y");
}

#[test]
fn merge_patch_replaces_status_conditions_like_fixture_i14() {
    let body = r#"{"status":{"conditions":[{"type":"FixturesCondition","status":"True","message":"set through PATCH /status"}]}}"#;
    let mut before = parse(PVC_LIST_A_572);
    before["status"]["conditions"] = json!([{"type":"Older","status":"True"}]);
    let result = apply(
        PatchType::Merge,
        "PersistentVolumeClaim",
        &before,
        body.as_bytes(),
    )
    .unwrap();
    // The real response also shows "lastProbeTime":null and "lastTransitionTime":null: those
    // come from the typed round trip, not from the patch.
    assert_eq!(
        result["status"],
        json!({"phase":"Pending","conditions":[{"type":"FixturesCondition","status":"True","message":"set through PATCH /status"}]})
    );
}

#[test]
fn merge_patch_from_the_attacher_adds_node_id_and_finalizer_to_a_volume_attachment() {
    let body = r#"{"metadata":{"annotations":{"csi.alpha.kubernetes.io/node-id":"ref-node"},"finalizers":["external-attacher/hostpath-csi-k8s-io"]}}"#;
    assert_eq!(merge(VA_367, body), Ok(parse(VA_369)));
}

#[test]
fn merge_patch_from_the_attacher_marks_the_volume_attachment_attached() {
    assert_eq!(
        merge(VA_369_BEFORE_ATTACHED, r#"{"status":{"attached":true}}"#),
        Ok(parse(VA_370))
    );
}

#[test]
fn merge_patch_from_the_attacher_with_null_finalizers_removes_the_list() {
    let result = merge(VA_380, r#"{"metadata":{"finalizers":null}}"#).unwrap();
    let mut expected = parse(VA_380);
    expected["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("finalizers");
    assert_eq!(result, expected);
}

#[test]
fn merge_patch_of_attach_error_time_keeps_message_and_error_code() {
    let body = r#"{"status":{"attachError":{"time":"2026-11-21T15:36:24Z"}}}"#;
    assert_eq!(merge(VA_FAIL_421, body), Ok(parse(VA_FAIL_424)));
}

#[test]
fn merge_patch_with_an_empty_object_changes_nothing() {
    assert_eq!(merge(VA_FAIL_421, "{}"), Ok(parse(VA_FAIL_421)));
}

#[test]
fn merge_patch_rejects_bodies_that_are_not_json_objects_as_invalid() {
    for body in ["[]", "null", "\"x\"", "3", "{", "", "metadata: {}"] {
        assert!(invalid(&merge(VA_367, body)), "body {body:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// JSON patch

#[test]
fn json_patch_tests_adds_and_removes_an_escaped_key_like_fixture_i2() {
    let body = r#"[{"op":"test","path":"/metadata/labels/merge","value":"yes"},{"op":"add","path":"/metadata/labels/jsonpatch","value":"yes"},{"op":"remove","path":"/metadata/annotations/fixtures.example.com~1note"}]"#;
    let mut expected = parse(PVC_LIST_A_568);
    // Removing the only annotation leaves an empty map; the real server omits it on encoding.
    expected["metadata"]["annotations"] = json!({});
    assert_eq!(json_patch(PVC_LIST_A_566_BEFORE_I2, body), Ok(expected));
}

#[test]
fn json_patch_with_a_failing_test_is_unprocessable_like_fixture_i3() {
    let body = r#"[{"op":"test","path":"/metadata/labels/merge","value":"no"},{"op":"add","path":"/metadata/labels/never","value":"applied"}]"#;
    assert_eq!(
        json_patch(PVC_LIST_A_568_BEFORE_I13, body),
        Err(PatchError::Unprocessable)
    );
}

#[test]
fn json_patch_removing_a_missing_path_is_unprocessable_like_fixture_i4() {
    let body = r#"[{"op":"remove","path":"/metadata/labels/does-not-exist"}]"#;
    assert_eq!(
        json_patch(PVC_LIST_A_568_BEFORE_I13, body),
        Err(PatchError::Unprocessable)
    );
}

#[test]
fn json_patch_from_the_attacher_appends_its_finalizer_to_a_pv() {
    let body = r#"[{"op":"add","path":"/metadata/finalizers/-","value":"external-attacher/hostpath-csi-k8s-io"}]"#;
    assert_eq!(
        json_patch(PV_PROVISIONED_362, body),
        Ok(parse(PV_PROVISIONED_368))
    );
}

#[test]
fn json_patch_from_the_attacher_removes_its_finalizer_by_tested_index() {
    let body = r#"[{"op":"test","path":"/metadata/finalizers/2","value":"external-attacher/hostpath-csi-k8s-io"},{"op":"remove","path":"/metadata/finalizers/2"}]"#;
    assert_eq!(
        json_patch(PV_RELEASED_385, body),
        Ok(parse(PV_RELEASED_386))
    );
}

#[test]
fn json_patch_index_guarded_finalizer_removal_is_unprocessable_once_the_list_changed() {
    let body = r#"[{"op":"test","path":"/metadata/finalizers/1","value":"external-attacher/hostpath-csi-k8s-io"},{"op":"remove","path":"/metadata/finalizers/1"}]"#;
    // Index 1 now holds another finalizer (the race csi-attacher hit in the capture run).
    assert_eq!(
        json_patch(PV_RELEASED_386, body),
        Err(PatchError::Unprocessable)
    );
    let gone = body.replace("/1", "/2");
    assert_eq!(
        json_patch(PV_RELEASED_386, &gone),
        Err(PatchError::Unprocessable)
    );
}

#[test]
fn json_patch_appending_to_a_missing_finalizer_list_is_unprocessable() {
    let body = r#"[{"op":"add","path":"/metadata/finalizers/-","value":"x"}]"#;
    assert_eq!(json_patch(VA_367, body), Err(PatchError::Unprocessable));
}

#[test]
fn json_patch_rejects_bodies_that_are_not_arrays_of_objects_as_invalid() {
    for body in ["{}", "[1]", "[[]]", "null", "[{", ""] {
        assert!(invalid(&json_patch(VA_367, body)), "body {body:?}");
    }
    assert_eq!(json_patch(VA_367, "[]"), Ok(parse(VA_367)));
}

// ---------------------------------------------------------------------------------------------
// Strategic merge patch: fixtures and sidecar traffic

#[test]
fn strategic_merge_patch_puts_a_new_finalizer_first_like_fixture_i5() {
    let body = r#"{"metadata":{"finalizers":["fixtures.example.com/hold"]}}"#;
    let result = strategic("PersistentVolume", &parse(PV_STATIC_419), body);
    assert_eq!(result, Ok(parse(PV_STATIC_570)));
}

#[test]
fn strategic_merge_patch_deletes_from_the_finalizer_list_like_fixture_i7() {
    let body =
        r#"{"metadata":{"$deleteFromPrimitiveList/finalizers":["fixtures.example.com/hold"]}}"#;
    let mut expected = parse(PV_STATIC_570);
    expected["metadata"]["finalizers"] = json!([
        "kubernetes.io/pv-protection",
        "external-attacher/hostpath-csi-k8s-io"
    ]);
    assert_eq!(
        strategic("PersistentVolume", &parse(PV_STATIC_570), body),
        Ok(expected)
    );
}

#[test]
fn strategic_merge_patch_from_the_provisioner_removes_its_finalizer() {
    let body = r#"{"metadata":{"$deleteFromPrimitiveList/finalizers":["external-provisioner.volume.kubernetes.io/finalizer"],"$setElementOrder/finalizers":["kubernetes.io/pv-protection","external-attacher/hostpath-csi-k8s-io"]}}"#;
    let before = parse(PV_RELEASED_386_BEFORE_PROVISIONER);
    assert_eq!(
        strategic("PersistentVolume", &before, body),
        Ok(parse(PV_RELEASED_387))
    );
}

#[test]
fn strategic_merge_patch_from_the_provisioner_can_remove_the_last_finalizer() {
    // The order list names a finalizer kube-controller-manager already removed.
    let body = r#"{"metadata":{"$deleteFromPrimitiveList/finalizers":["external-provisioner.volume.kubernetes.io/finalizer"],"$setElementOrder/finalizers":["kubernetes.io/pv-protection"]}}"#;
    let result = strategic("PersistentVolume", &parse(PV_LAST_FINALIZER_444), body).unwrap();
    // An empty list here; the real server's typed round trip omits it and deletes the object.
    assert_eq!(result["metadata"]["finalizers"], json!([]));
}

#[test]
fn strategic_merge_patch_from_the_resizer_adds_the_resizing_condition() {
    let body = r#"{"metadata":{"resourceVersion":"373"},"status":{"allocatedResourceStatuses":{"storage":"ControllerResizeInProgress"},"allocatedResources":{"storage":"2Gi"},"conditions":[{"lastProbeTime":null,"lastTransitionTime":"2026-11-21T15:35:59Z","status":"True","type":"Resizing"}]}}"#;
    let mut expected = parse(PVC_RESIZE_375);
    // A list new to the object is taken without its nulls (apimachinery
    // discardNullValuesFromPatch); the stored object shows "lastProbeTime":null again only
    // because of the typed round trip.
    expected["status"]["conditions"][0]
        .as_object_mut()
        .unwrap()
        .remove("lastProbeTime");
    let result = strategic("PersistentVolumeClaim", &parse(PVC_RESIZE_373), body);
    assert_eq!(result, Ok(expected));
}

#[test]
fn strategic_merge_patch_from_the_resizer_merges_conditions_by_type_in_set_element_order() {
    let body = r#"{"metadata":{"resourceVersion":"375"},"status":{"$setElementOrder/conditions":[{"type":"Resizing"},{"type":"FileSystemResizePending"}],"allocatedResourceStatuses":{"storage":"NodeResizePending"},"conditions":[{"lastProbeTime":null,"lastTransitionTime":"2026-11-21T15:35:59Z","message":"Waiting for user to (re-)start a pod to finish file system resize of volume on node.","status":"True","type":"FileSystemResizePending"}]}}"#;
    let before = parse(PVC_RESIZE_375_BEFORE_FS_PENDING);
    assert_eq!(
        strategic("PersistentVolumeClaim", &before, body),
        Ok(parse(PVC_RESIZE_378))
    );
}

#[test]
fn strategic_merge_patch_from_the_resizer_records_the_controller_resize_error() {
    let body = r#"{"status":{"$setElementOrder/conditions":[{"type":"Resizing"},{"type":"ControllerResizeError"}],"allocatedResourceStatuses":{"storage":"ControllerResizeInfeasible"},"conditions":[{"lastProbeTime":null,"lastTransitionTime":"2026-11-21T15:36:23Z","message":"failed to expand pvc with rpc error: code = OutOfRange desc = Requested capacity 2199023255552 exceeds maximum allowed 1099511627776","status":"True","type":"ControllerResizeError"}]}}"#;
    let before = parse(PVC2_RESIZE_410);
    assert_eq!(
        strategic("PersistentVolumeClaim", &before, body),
        Ok(parse(PVC2_RESIZE_412))
    );
}

#[test]
fn strategic_merge_patch_from_the_resizer_keeps_pv_finalizer_order_and_updates_capacity() {
    let body = r#"{"metadata":{"$setElementOrder/finalizers":["external-provisioner.volume.kubernetes.io/finalizer","kubernetes.io/pv-protection","external-attacher/hostpath-csi-k8s-io"]},"spec":{"capacity":{"storage":"2Gi"}}}"#;
    let before = parse(PV_PROVISIONED_368_BEFORE_RESIZE);
    assert_eq!(
        strategic("PersistentVolume", &before, body),
        Ok(parse(PV_PROVISIONED_377))
    );
}

#[test]
fn strategic_merge_patch_with_nothing_or_only_the_resource_version_changes_nothing() {
    let stored = parse(PVC2_RESIZE_412_AS_STORED);
    for body in ["{}", r#"{"metadata":{"resourceVersion":"412"}}"#] {
        assert_eq!(
            strategic("PersistentVolumeClaim", &stored, body),
            Ok(stored.clone()),
            "{body}"
        );
    }
}

#[test]
fn strategic_merge_patch_updates_an_event_count() {
    let body = r#"{"count":2,"lastTimestamp":"2026-11-21T15:36:23Z","message":"External resizer is resizing volume pvc-b2dd0bd6-243c-474f-9cb0-c80f19faedff"}"#;
    assert_eq!(
        strategic("Event", &parse(EVENT_411), body),
        Ok(parse(EVENT_414))
    );
}

// ---------------------------------------------------------------------------------------------
// Strategic merge patch: rules and directives

fn pv_with_finalizers(finalizers: &Value) -> Value {
    json!({"kind":"PersistentVolume","metadata":{"name":"pv","finalizers":finalizers},"spec":{}})
}

#[test]
fn strategic_merge_patch_orders_finalizers_by_patch_then_server_order() {
    let cases = [
        // Known items keep the server order, new ones go before the server items after them.
        (
            json!(["a", "b", "c"]),
            json!(["b", "x"]),
            json!(["a", "b", "x", "c"]),
        ),
        (
            json!(["a", "b"]),
            json!(["x", "y"]),
            json!(["x", "y", "a", "b"]),
        ),
        (json!(["a", "b"]), json!(["b", "a"]), json!(["b", "a"])),
        (json!(["a", "b"]), json!(["a"]), json!(["a", "b"])),
        (json!(["a", "a", "b"]), json!(["c"]), json!(["c", "a", "b"])),
    ];
    for (current, patch, expected) in cases {
        let body = json!({"metadata":{"finalizers":patch}}).to_string();
        let result = strategic("PersistentVolume", &pv_with_finalizers(&current), &body);
        assert_eq!(
            result.unwrap()["metadata"]["finalizers"],
            expected,
            "{current} + {patch}"
        );
    }
}

#[test]
fn strategic_merge_patch_with_an_empty_finalizer_list_changes_nothing_but_null_clears_it() {
    let pv = pv_with_finalizers(&json!(["a", "b"]));
    let unchanged = strategic("PersistentVolume", &pv, r#"{"metadata":{"finalizers":[]}}"#);
    assert_eq!(unchanged, Ok(pv.clone()));
    let cleared = strategic(
        "PersistentVolume",
        &pv,
        r#"{"metadata":{"finalizers":null}}"#,
    )
    .unwrap();
    assert_eq!(cleared["metadata"], json!({"name":"pv"}));
    let replaced = strategic(
        "PersistentVolume",
        &pv,
        r#"{"metadata":{"finalizers":["c",{"$patch":"replace"}]}}"#,
    );
    assert!(invalid(&replaced), "mixed scalar and object items");
}

#[test]
fn strategic_merge_patch_set_element_order_reorders_the_finalizers() {
    let pv = pv_with_finalizers(&json!(["a", "b", "c"]));
    let body = r#"{"metadata":{"$setElementOrder/finalizers":["c","a","b"]}}"#;
    let result = strategic("PersistentVolume", &pv, body).unwrap();
    assert_eq!(result["metadata"]["finalizers"], json!(["c", "a", "b"]));
    let body = r#"{"metadata":{"$setElementOrder/finalizers":["d","b","a"],"finalizers":["d"]}}"#;
    let result = strategic("PersistentVolume", &pv, body).unwrap();
    assert_eq!(
        result["metadata"]["finalizers"],
        json!(["d", "b", "a", "c"])
    );
}

fn pvc_with_conditions(conditions: &Value) -> Value {
    json!({"kind":"PersistentVolumeClaim","metadata":{"name":"c"},"status":{"phase":"Bound","conditions":conditions}})
}

#[test]
fn strategic_merge_patch_merges_pvc_conditions_by_type() {
    let pvc = pvc_with_conditions(&json!([
        {"type":"Resizing","status":"True","message":"old"},
        {"type":"FileSystemResizePending","status":"True"}
    ]));
    let body = r#"{"status":{"conditions":[{"type":"Resizing","status":"False","message":null},{"type":"New","status":"True"}]}}"#;
    let result = strategic("PersistentVolumeClaim", &pvc, body).unwrap();
    assert_eq!(
        result["status"]["conditions"],
        json!([
            {"type":"Resizing","status":"False"},
            {"type":"New","status":"True"},
            {"type":"FileSystemResizePending","status":"True"}
        ])
    );
}

#[test]
fn strategic_merge_patch_deletes_and_replaces_list_items_with_patch_directives() {
    let pvc =
        pvc_with_conditions(&json!([{"type":"A","status":"True"},{"type":"B","status":"True"}]));
    let delete = r#"{"status":{"conditions":[{"type":"A","$patch":"delete"}]}}"#;
    let result = strategic("PersistentVolumeClaim", &pvc, delete).unwrap();
    assert_eq!(
        result["status"]["conditions"],
        json!([{"type":"B","status":"True"}])
    );

    let replace =
        r#"{"status":{"conditions":[{"$patch":"replace"},{"type":"C","status":"False"}]}}"#;
    let result = strategic("PersistentVolumeClaim", &pvc, replace).unwrap();
    assert_eq!(
        result["status"]["conditions"],
        json!([{"type":"C","status":"False"}])
    );

    for bad in [
        r#"{"status":{"conditions":[{"$patch":"merge"}]}}"#,
        r#"{"status":{"conditions":[{"$patch":"bogus","type":"A"}]}}"#,
        r#"{"status":{"conditions":[{"$patch":"delete"}]}}"#,
        r#"{"status":{"conditions":[{"status":"True"}]}}"#,
    ] {
        assert!(
            invalid(&strategic("PersistentVolumeClaim", &pvc, bad)),
            "{bad}"
        );
    }
}

#[test]
fn strategic_merge_patch_replaces_and_deletes_maps_with_patch_directives() {
    let pvc = json!({"kind":"PersistentVolumeClaim","metadata":{"name":"c","annotations":{"a":"1"}},
        "spec":{"resources":{"requests":{"storage":"1Gi"},"limits":{"storage":"2Gi"}}}});
    let body = r#"{"metadata":{"annotations":{"$patch":"delete"}},"spec":{"resources":{"$patch":"replace","requests":{"storage":"5Gi"}}}}"#;
    let result = strategic("PersistentVolumeClaim", &pvc, body).unwrap();
    assert_eq!(result["metadata"]["annotations"], json!({}));
    assert_eq!(
        result["spec"]["resources"],
        json!({"requests":{"storage":"5Gi"}})
    );
    assert!(invalid(&strategic(
        "PersistentVolumeClaim",
        &pvc,
        r#"{"spec":{"$patch":"bogus"}}"#
    )));
}

#[test]
fn strategic_merge_patch_retain_keys_drops_unlisted_fields() {
    let pod = json!({"kind":"Pod","spec":{"volumes":[{"name":"v","emptyDir":{},"secret":{"secretName":"s"}}]}});
    let body = r#"{"spec":{"volumes":[{"name":"v","$retainKeys":["name","secret"],"secret":{"secretName":"t"}}]}}"#;
    let result = strategic("Pod", &pod, body).unwrap();
    assert_eq!(
        result["spec"]["volumes"],
        json!([{"name":"v","secret":{"secretName":"t"}}])
    );
    let unlisted = r#"{"spec":{"volumes":[{"name":"v","$retainKeys":["name"],"secret":{}}]}}"#;
    assert!(invalid(&strategic("Pod", &pod, unlisted)));
}

#[test]
fn strategic_merge_patch_merges_owner_references_by_uid() {
    let csinode = json!({"kind":"CSINode","metadata":{"name":"n","ownerReferences":[
        {"apiVersion":"v1","kind":"Node","name":"n","uid":"u1"}]},"spec":{"drivers":[]}});
    let body = r#"{"metadata":{"ownerReferences":[{"uid":"u1","controller":true},{"apiVersion":"v1","kind":"Node","name":"m","uid":"u2"}]}}"#;
    let result = strategic("CSINode", &csinode, body).unwrap();
    assert_eq!(
        result["metadata"]["ownerReferences"],
        json!([
            {"apiVersion":"v1","kind":"Node","name":"n","uid":"u1","controller":true},
            {"apiVersion":"v1","kind":"Node","name":"m","uid":"u2"}
        ])
    );
}

#[test]
fn strategic_merge_patch_merges_csinode_drivers_by_name() {
    let csinode = json!({"kind":"CSINode","metadata":{"name":"ref-node"},"spec":{"drivers":[
        {"name":"hostpath.csi.k8s.io","nodeID":"ref-node","topologyKeys":["topology.hostpath.csi/node"]}]}});
    let body = r#"{"spec":{"drivers":[{"name":"other.csi.k8s.io","nodeID":"n2"},{"name":"hostpath.csi.k8s.io","topologyKeys":["zone"]}]}}"#;
    let result = strategic("CSINode", &csinode, body).unwrap();
    assert_eq!(
        result["spec"]["drivers"],
        json!([
            {"name":"other.csi.k8s.io","nodeID":"n2"},
            {"name":"hostpath.csi.k8s.io","nodeID":"ref-node","topologyKeys":["zone"]}
        ])
    );
}

#[test]
fn strategic_merge_patch_merges_pod_containers_by_name_and_ports_by_container_port() {
    let pod = json!({"kind":"Pod","spec":{"containers":[
        {"name":"a","image":"a:1","ports":[{"containerPort":80,"name":"http"}],"args":["x"]},
        {"name":"b","image":"b:1"}]}});
    let body = r#"{"spec":{"containers":[{"name":"a","ports":[{"containerPort":80,"protocol":"TCP"},{"containerPort":443}],"args":["y"]}]}}"#;
    let result = strategic("Pod", &pod, body).unwrap();
    assert_eq!(
        result["spec"]["containers"],
        json!([
            {"name":"a","image":"a:1","args":["y"],"ports":[
                {"containerPort":80,"name":"http","protocol":"TCP"},{"containerPort":443}]},
            {"name":"b","image":"b:1"}
        ])
    );
}

#[test]
fn strategic_merge_patch_merges_node_conditions_and_addresses_by_type() {
    let node = json!({"kind":"Node","spec":{"podCIDRs":["10.0.0.0/24"]},"status":{
        "conditions":[{"type":"Ready","status":"True"}],
        "addresses":[{"type":"InternalIP","address":"10.1.1.1"}]}});
    let body = r#"{"spec":{"podCIDRs":["fd00::/64"]},"status":{"conditions":[{"type":"Ready","status":"False"}],"addresses":[{"type":"Hostname","address":"n"}]}}"#;
    let result = strategic("Node", &node, body).unwrap();
    assert_eq!(
        result["spec"]["podCIDRs"],
        json!(["fd00::/64", "10.0.0.0/24"])
    );
    assert_eq!(
        result["status"]["conditions"],
        json!([{"type":"Ready","status":"False"}])
    );
    assert_eq!(
        result["status"]["addresses"],
        json!([{"type":"Hostname","address":"n"},{"type":"InternalIP","address":"10.1.1.1"}])
    );
}

#[test]
fn strategic_merge_patch_replaces_lists_without_a_merge_strategy() {
    let cases = [
        (
            "PersistentVolumeClaim",
            "/spec/accessModes",
            json!(["ReadWriteOnce", "ReadOnlyMany"]),
            json!(["ReadWriteMany"]),
        ),
        (
            "PersistentVolume",
            "/spec/mountOptions",
            json!(["noatime", "ro"]),
            json!(["sync"]),
        ),
        (
            "StorageClass",
            "/allowedTopologies",
            json!([{"matchLabelExpressions":[{"key":"z","values":["a"]}]}]),
            json!([{"matchLabelExpressions":[{"key":"z","values":["b"]}]}]),
        ),
        // Conditions only merge by type for the Kinds whose Go types say so.
        (
            "SomeCustomKind",
            "/status/conditions",
            json!([{"type":"A"}]),
            json!([{"type":"B"}]),
        ),
    ];
    for (kind, pointer, current, patch) in cases {
        let mut object = json!({"kind":kind});
        let mut body = json!({});
        set(&mut object, pointer, current);
        set(&mut body, pointer, patch.clone());
        let result = strategic(kind, &object, &body.to_string()).unwrap();
        assert_eq!(result.pointer(pointer), Some(&patch), "{kind} {pointer}");
    }
}

fn set(target: &mut Value, pointer: &str, value: Value) {
    let mut node = target;
    let mut names = pointer.trim_start_matches('/').split('/').peekable();
    while let Some(name) = names.next() {
        if names.peek().is_none() {
            node[name] = value;
            return;
        }
        node = &mut node[name];
    }
}

#[test]
fn strategic_merge_patch_deletes_map_entries_with_null_and_drops_nulls_in_new_values() {
    let pvc =
        json!({"kind":"PersistentVolumeClaim","metadata":{"name":"c","labels":{"a":"1","b":"2"}}});
    let body = r#"{"metadata":{"labels":{"a":null,"c":"3"},"annotations":{"x":"1","y":null}},"spec":{"volumeName":null}}"#;
    let result = strategic("PersistentVolumeClaim", &pvc, body).unwrap();
    // `spec` was missing, so the patch value is taken without its nulls: an empty map, as
    // apimachinery leaves it.
    assert_eq!(
        result,
        json!({"kind":"PersistentVolumeClaim","metadata":{"name":"c","labels":{"b":"2","c":"3"},"annotations":{"x":"1"}},"spec":{}})
    );
}

#[test]
fn strategic_merge_patch_never_stores_directive_keys() {
    let pvc = json!({"kind":"PersistentVolumeClaim","metadata":{"name":"c"},"status":{}});
    let body = r#"{"status":{"$setElementOrder/conditions":[{"type":"A"}],"conditions":[{"type":"A","status":"True"}]},"spec":{"accessModes":["ReadWriteOnce"],"$retainKeys":["accessModes"]}}"#;
    let result = strategic("PersistentVolumeClaim", &pvc, body).unwrap();
    assert_eq!(
        result,
        json!({"kind":"PersistentVolumeClaim","metadata":{"name":"c"},
            "status":{"conditions":[{"type":"A","status":"True"}]},"spec":{"accessModes":["ReadWriteOnce"]}})
    );
}

#[test]
fn strategic_merge_patch_rejects_malformed_bodies_and_directives_as_invalid() {
    let pv = pv_with_finalizers(&json!(["a", "b"]));
    for body in [
        "[]",
        "null",
        "not json",
        r#"{"metadata":{"$deleteFromPrimitiveListfinalizers":["a"]}}"#,
        r#"{"metadata":{"$setElementOrder/finalizers":"a"}}"#,
        r#"{"metadata":{"$setElementOrder/finalizers":["a"],"finalizers":["b"]}}"#,
        r#"{"metadata":{"$retainKeys":"name"}}"#,
        r#"{"$patch":"bogus"}"#,
    ] {
        assert!(invalid(&strategic("PersistentVolume", &pv, body)), "{body}");
    }
}

// ---------------------------------------------------------------------------------------------
// Server-side apply (simplified to a merge patch)

#[test]
fn apply_patch_merges_the_applied_fields_like_fixture_i13() {
    let body = r#"{"apiVersion":"v1","kind":"PersistentVolumeClaim","metadata":{"name":"fx-list-a","namespace":"fixtures","labels":{"ssa":"yes"}}}"#;
    let before = parse(PVC_LIST_A_568_BEFORE_I13);
    let result = apply(
        PatchType::Apply,
        "PersistentVolumeClaim",
        &before,
        body.as_bytes(),
    );
    assert_eq!(result, Ok(parse(PVC_LIST_A_572)));
}

#[test]
fn apply_patch_accepts_yaml_bodies() {
    let body = "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: fx-list-a\n  namespace: fixtures\n  labels:\n    ssa: \"yes\"\n";
    let before = parse(PVC_LIST_A_568_BEFORE_I13);
    let result = apply(
        PatchType::Apply,
        "PersistentVolumeClaim",
        &before,
        body.as_bytes(),
    );
    assert_eq!(result, Ok(parse(PVC_LIST_A_572)));
}

#[test]
fn apply_patch_rejects_bodies_that_are_not_objects_as_invalid() {
    let before = parse(PVC_LIST_A_568_BEFORE_I13);
    for body in ["- a\n- b\n", "just a string", "[1]", "{unclosed: [", ""] {
        let result = apply(
            PatchType::Apply,
            "PersistentVolumeClaim",
            &before,
            body.as_bytes(),
        );
        assert!(invalid(&result), "body {body:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Fixture objects (compact JSON from objects/watch-*.jsonl, managedFields removed)

/// PVC fx-list-a before fixture i1 (resourceVersion 478).
const PVC_LIST_A_478: &str = r#"{"kind":"PersistentVolumeClaim","apiVersion":"v1","metadata":{"name":"fx-list-a","namespace":"fixtures","uid":"39ecb7ff-b323-4196-a809-3ea5b016795a","resourceVersion":"478","creationTimestamp":"2026-11-21T15:37:58Z","labels":{"fixtures-list":"true"},"finalizers":["kubernetes.io/pvc-protection"]},"spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"1Gi"}},"storageClassName":"fixtures-none","volumeMode":"Filesystem"},"status":{"phase":"Pending"}}"#;

/// fx-list-a after i1 (stored at 566; resourceVersion left at 478 here because the caller bumps it).
const PVC_LIST_A_566: &str = r#"{"kind":"PersistentVolumeClaim","apiVersion":"v1","metadata":{"name":"fx-list-a","namespace":"fixtures","uid":"39ecb7ff-b323-4196-a809-3ea5b016795a","resourceVersion":"478","creationTimestamp":"2026-11-21T15:37:58Z","labels":{"fixtures-list":"true","merge":"yes"},"annotations":{"fixtures.example.com/note":"merge-patch"},"finalizers":["kubernetes.io/pvc-protection"]},"spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"1Gi"}},"storageClassName":"fixtures-none","volumeMode":"Filesystem"},"status":{"phase":"Pending"}}"#;

/// fx-list-a before fixture i2 (resourceVersion 566).
const PVC_LIST_A_566_BEFORE_I2: &str = r#"{"kind":"PersistentVolumeClaim","apiVersion":"v1","metadata":{"name":"fx-list-a","namespace":"fixtures","uid":"39ecb7ff-b323-4196-a809-3ea5b016795a","resourceVersion":"566","creationTimestamp":"2026-11-21T15:37:58Z","labels":{"fixtures-list":"true","merge":"yes"},"annotations":{"fixtures.example.com/note":"merge-patch"},"finalizers":["kubernetes.io/pvc-protection"]},"spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"1Gi"}},"storageClassName":"fixtures-none","volumeMode":"Filesystem"},"status":{"phase":"Pending"}}"#;

/// fx-list-a after i2 (stored at 568; resourceVersion as before the patch).
const PVC_LIST_A_568: &str = r#"{"kind":"PersistentVolumeClaim","apiVersion":"v1","metadata":{"name":"fx-list-a","namespace":"fixtures","uid":"39ecb7ff-b323-4196-a809-3ea5b016795a","resourceVersion":"566","creationTimestamp":"2026-11-21T15:37:58Z","labels":{"fixtures-list":"true","jsonpatch":"yes","merge":"yes"},"finalizers":["kubernetes.io/pvc-protection"]},"spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"1Gi"}},"storageClassName":"fixtures-none","volumeMode":"Filesystem"},"status":{"phase":"Pending"}}"#;

/// fx-list-a before fixtures i3, i4, i10 and i13 (resourceVersion 568).
const PVC_LIST_A_568_BEFORE_I13: &str = r#"{"kind":"PersistentVolumeClaim","apiVersion":"v1","metadata":{"name":"fx-list-a","namespace":"fixtures","uid":"39ecb7ff-b323-4196-a809-3ea5b016795a","resourceVersion":"568","creationTimestamp":"2026-11-21T15:37:58Z","labels":{"fixtures-list":"true","jsonpatch":"yes","merge":"yes"},"finalizers":["kubernetes.io/pvc-protection"]},"spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"1Gi"}},"storageClassName":"fixtures-none","volumeMode":"Filesystem"},"status":{"phase":"Pending"}}"#;

/// fx-list-a after the server-side apply of i13 (stored at 572).
const PVC_LIST_A_572: &str = r#"{"kind":"PersistentVolumeClaim","apiVersion":"v1","metadata":{"name":"fx-list-a","namespace":"fixtures","uid":"39ecb7ff-b323-4196-a809-3ea5b016795a","resourceVersion":"568","creationTimestamp":"2026-11-21T15:37:58Z","labels":{"fixtures-list":"true","jsonpatch":"yes","merge":"yes","ssa":"yes"},"finalizers":["kubernetes.io/pvc-protection"]},"spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"1Gi"}},"storageClassName":"fixtures-none","volumeMode":"Filesystem"},"status":{"phase":"Pending"}}"#;

/// PV fx-static-pv before fixture i5 (resourceVersion 419).
const PV_STATIC_419: &str = r#"{"kind":"PersistentVolume","apiVersion":"v1","metadata":{"name":"fx-static-pv","uid":"b610ec32-c9c2-41ef-86df-50e3fc18f634","resourceVersion":"419","creationTimestamp":"2026-11-21T15:36:23Z","labels":{"fixtures":"true"},"finalizers":["kubernetes.io/pv-protection","external-attacher/hostpath-csi-k8s-io"]},"spec":{"capacity":{"storage":"1Gi"},"csi":{"driver":"hostpath.csi.k8s.io","volumeHandle":"fx-no-such-volume"},"accessModes":["ReadWriteOnce"],"persistentVolumeReclaimPolicy":"Retain","storageClassName":"fixtures-static","volumeMode":"Filesystem"},"status":{"phase":"Available","lastPhaseTransitionTime":"2026-11-21T15:36:23Z"}}"#;

/// fx-static-pv after i5 (stored at 570), also the object i6 and i7 were sent to.
const PV_STATIC_570: &str = r#"{"kind":"PersistentVolume","apiVersion":"v1","metadata":{"name":"fx-static-pv","uid":"b610ec32-c9c2-41ef-86df-50e3fc18f634","resourceVersion":"419","creationTimestamp":"2026-11-21T15:36:23Z","labels":{"fixtures":"true"},"finalizers":["fixtures.example.com/hold","kubernetes.io/pv-protection","external-attacher/hostpath-csi-k8s-io"]},"spec":{"capacity":{"storage":"1Gi"},"csi":{"driver":"hostpath.csi.k8s.io","volumeHandle":"fx-no-such-volume"},"accessModes":["ReadWriteOnce"],"persistentVolumeReclaimPolicy":"Retain","storageClassName":"fixtures-static","volumeMode":"Filesystem"},"status":{"phase":"Available","lastPhaseTransitionTime":"2026-11-21T15:36:23Z"}}"#;

/// Provisioned PV before csi-attacher adds its finalizer (resourceVersion 362).
const PV_PROVISIONED_362: &str = r#"{"kind":"PersistentVolume","apiVersion":"v1","metadata":{"name":"pvc-dbaa5493-3cc2-45fc-9d93-d1c6eb28560a","uid":"e53a3fcd-672e-40ed-a167-7a8c6bc87f93","resourceVersion":"362","creationTimestamp":"2026-11-21T15:35:48Z","annotations":{"pv.kubernetes.io/provisioned-by":"hostpath.csi.k8s.io","volume.kubernetes.io/provisioner-deletion-secret-name":"","volume.kubernetes.io/provisioner-deletion-secret-namespace":""},"finalizers":["external-provisioner.volume.kubernetes.io/finalizer","kubernetes.io/pv-protection"]},"spec":{"capacity":{"storage":"1Gi"},"csi":{"driver":"hostpath.csi.k8s.io","volumeHandle":"39d5bfc9-e5c1-11f1-9a92-6a32d2d0897e","fsType":"xfs","volumeAttributes":{"fixtures.example.com/color":"blue","storage.kubernetes.io/csiProvisionerIdentity":"1795275348577-3187-hostpath.csi.k8s.io"}},"accessModes":["ReadWriteOnce"],"claimRef":{"kind":"PersistentVolumeClaim","namespace":"fixtures","name":"fx-pvc","uid":"dbaa5493-3cc2-45fc-9d93-d1c6eb28560a","apiVersion":"v1","resourceVersion":"355"},"persistentVolumeReclaimPolicy":"Delete","storageClassName":"fixtures-hostpath","mountOptions":["noatime"],"volumeMode":"Filesystem","nodeAffinity":{"required":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"topology.hostpath.csi/node","operator":"In","values":["ref-node"]}]}]}}},"status":{"phase":"Bound","lastPhaseTransitionTime":"2026-11-21T15:35:48Z"}}"#;

/// The same PV after the attacher JSON patch (stored at 368).
const PV_PROVISIONED_368: &str = r#"{"kind":"PersistentVolume","apiVersion":"v1","metadata":{"name":"pvc-dbaa5493-3cc2-45fc-9d93-d1c6eb28560a","uid":"e53a3fcd-672e-40ed-a167-7a8c6bc87f93","resourceVersion":"362","creationTimestamp":"2026-11-21T15:35:48Z","annotations":{"pv.kubernetes.io/provisioned-by":"hostpath.csi.k8s.io","volume.kubernetes.io/provisioner-deletion-secret-name":"","volume.kubernetes.io/provisioner-deletion-secret-namespace":""},"finalizers":["external-provisioner.volume.kubernetes.io/finalizer","kubernetes.io/pv-protection","external-attacher/hostpath-csi-k8s-io"]},"spec":{"capacity":{"storage":"1Gi"},"csi":{"driver":"hostpath.csi.k8s.io","volumeHandle":"39d5bfc9-e5c1-11f1-9a92-6a32d2d0897e","fsType":"xfs","volumeAttributes":{"fixtures.example.com/color":"blue","storage.kubernetes.io/csiProvisionerIdentity":"1795275348577-3187-hostpath.csi.k8s.io"}},"accessModes":["ReadWriteOnce"],"claimRef":{"kind":"PersistentVolumeClaim","namespace":"fixtures","name":"fx-pvc","uid":"dbaa5493-3cc2-45fc-9d93-d1c6eb28560a","apiVersion":"v1","resourceVersion":"355"},"persistentVolumeReclaimPolicy":"Delete","storageClassName":"fixtures-hostpath","mountOptions":["noatime"],"volumeMode":"Filesystem","nodeAffinity":{"required":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"topology.hostpath.csi/node","operator":"In","values":["ref-node"]}]}]}}},"status":{"phase":"Bound","lastPhaseTransitionTime":"2026-11-21T15:35:48Z"}}"#;

/// The PV before csi-resizer patches its capacity (resourceVersion 368).
const PV_PROVISIONED_368_BEFORE_RESIZE: &str = r#"{"kind":"PersistentVolume","apiVersion":"v1","metadata":{"name":"pvc-dbaa5493-3cc2-45fc-9d93-d1c6eb28560a","uid":"e53a3fcd-672e-40ed-a167-7a8c6bc87f93","resourceVersion":"368","creationTimestamp":"2026-11-21T15:35:48Z","annotations":{"pv.kubernetes.io/provisioned-by":"hostpath.csi.k8s.io","volume.kubernetes.io/provisioner-deletion-secret-name":"","volume.kubernetes.io/provisioner-deletion-secret-namespace":""},"finalizers":["external-provisioner.volume.kubernetes.io/finalizer","kubernetes.io/pv-protection","external-attacher/hostpath-csi-k8s-io"]},"spec":{"capacity":{"storage":"1Gi"},"csi":{"driver":"hostpath.csi.k8s.io","volumeHandle":"39d5bfc9-e5c1-11f1-9a92-6a32d2d0897e","fsType":"xfs","volumeAttributes":{"fixtures.example.com/color":"blue","storage.kubernetes.io/csiProvisionerIdentity":"1795275348577-3187-hostpath.csi.k8s.io"}},"accessModes":["ReadWriteOnce"],"claimRef":{"kind":"PersistentVolumeClaim","namespace":"fixtures","name":"fx-pvc","uid":"dbaa5493-3cc2-45fc-9d93-d1c6eb28560a","apiVersion":"v1","resourceVersion":"355"},"persistentVolumeReclaimPolicy":"Delete","storageClassName":"fixtures-hostpath","mountOptions":["noatime"],"volumeMode":"Filesystem","nodeAffinity":{"required":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"topology.hostpath.csi/node","operator":"In","values":["ref-node"]}]}]}}},"status":{"phase":"Bound","lastPhaseTransitionTime":"2026-11-21T15:35:48Z"}}"#;

/// The PV after the resizer SMP (stored at 377).
const PV_PROVISIONED_377: &str = r#"{"kind":"PersistentVolume","apiVersion":"v1","metadata":{"name":"pvc-dbaa5493-3cc2-45fc-9d93-d1c6eb28560a","uid":"e53a3fcd-672e-40ed-a167-7a8c6bc87f93","resourceVersion":"368","creationTimestamp":"2026-11-21T15:35:48Z","annotations":{"pv.kubernetes.io/provisioned-by":"hostpath.csi.k8s.io","volume.kubernetes.io/provisioner-deletion-secret-name":"","volume.kubernetes.io/provisioner-deletion-secret-namespace":""},"finalizers":["external-provisioner.volume.kubernetes.io/finalizer","kubernetes.io/pv-protection","external-attacher/hostpath-csi-k8s-io"]},"spec":{"capacity":{"storage":"2Gi"},"csi":{"driver":"hostpath.csi.k8s.io","volumeHandle":"39d5bfc9-e5c1-11f1-9a92-6a32d2d0897e","fsType":"xfs","volumeAttributes":{"fixtures.example.com/color":"blue","storage.kubernetes.io/csiProvisionerIdentity":"1795275348577-3187-hostpath.csi.k8s.io"}},"accessModes":["ReadWriteOnce"],"claimRef":{"kind":"PersistentVolumeClaim","namespace":"fixtures","name":"fx-pvc","uid":"dbaa5493-3cc2-45fc-9d93-d1c6eb28560a","apiVersion":"v1","resourceVersion":"355"},"persistentVolumeReclaimPolicy":"Delete","storageClassName":"fixtures-hostpath","mountOptions":["noatime"],"volumeMode":"Filesystem","nodeAffinity":{"required":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"topology.hostpath.csi/node","operator":"In","values":["ref-node"]}]}]}}},"status":{"phase":"Bound","lastPhaseTransitionTime":"2026-11-21T15:35:48Z"}}"#;

/// The released, deleted PV before csi-attacher removes its finalizer (resourceVersion 385).
const PV_RELEASED_385: &str = r#"{"kind":"PersistentVolume","apiVersion":"v1","metadata":{"name":"pvc-dbaa5493-3cc2-45fc-9d93-d1c6eb28560a","uid":"e53a3fcd-672e-40ed-a167-7a8c6bc87f93","resourceVersion":"385","creationTimestamp":"2026-11-21T15:35:48Z","deletionTimestamp":"2026-11-21T15:36:06Z","deletionGracePeriodSeconds":0,"annotations":{"pv.kubernetes.io/provisioned-by":"hostpath.csi.k8s.io","volume.kubernetes.io/provisioner-deletion-secret-name":"","volume.kubernetes.io/provisioner-deletion-secret-namespace":""},"finalizers":["external-provisioner.volume.kubernetes.io/finalizer","kubernetes.io/pv-protection","external-attacher/hostpath-csi-k8s-io"]},"spec":{"capacity":{"storage":"2Gi"},"csi":{"driver":"hostpath.csi.k8s.io","volumeHandle":"39d5bfc9-e5c1-11f1-9a92-6a32d2d0897e","fsType":"xfs","volumeAttributes":{"fixtures.example.com/color":"blue","storage.kubernetes.io/csiProvisionerIdentity":"1795275348577-3187-hostpath.csi.k8s.io"}},"accessModes":["ReadWriteOnce"],"claimRef":{"kind":"PersistentVolumeClaim","namespace":"fixtures","name":"fx-pvc","uid":"dbaa5493-3cc2-45fc-9d93-d1c6eb28560a","apiVersion":"v1","resourceVersion":"355"},"persistentVolumeReclaimPolicy":"Delete","storageClassName":"fixtures-hostpath","mountOptions":["noatime"],"volumeMode":"Filesystem","nodeAffinity":{"required":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"topology.hostpath.csi/node","operator":"In","values":["ref-node"]}]}]}}},"status":{"phase":"Released","lastPhaseTransitionTime":"2026-11-21T15:36:06Z"}}"#;

/// The PV after the attacher test+remove JSON patch (stored at 386).
const PV_RELEASED_386: &str = r#"{"kind":"PersistentVolume","apiVersion":"v1","metadata":{"name":"pvc-dbaa5493-3cc2-45fc-9d93-d1c6eb28560a","uid":"e53a3fcd-672e-40ed-a167-7a8c6bc87f93","resourceVersion":"385","creationTimestamp":"2026-11-21T15:35:48Z","deletionTimestamp":"2026-11-21T15:36:06Z","deletionGracePeriodSeconds":0,"annotations":{"pv.kubernetes.io/provisioned-by":"hostpath.csi.k8s.io","volume.kubernetes.io/provisioner-deletion-secret-name":"","volume.kubernetes.io/provisioner-deletion-secret-namespace":""},"finalizers":["external-provisioner.volume.kubernetes.io/finalizer","kubernetes.io/pv-protection"]},"spec":{"capacity":{"storage":"2Gi"},"csi":{"driver":"hostpath.csi.k8s.io","volumeHandle":"39d5bfc9-e5c1-11f1-9a92-6a32d2d0897e","fsType":"xfs","volumeAttributes":{"fixtures.example.com/color":"blue","storage.kubernetes.io/csiProvisionerIdentity":"1795275348577-3187-hostpath.csi.k8s.io"}},"accessModes":["ReadWriteOnce"],"claimRef":{"kind":"PersistentVolumeClaim","namespace":"fixtures","name":"fx-pvc","uid":"dbaa5493-3cc2-45fc-9d93-d1c6eb28560a","apiVersion":"v1","resourceVersion":"355"},"persistentVolumeReclaimPolicy":"Delete","storageClassName":"fixtures-hostpath","mountOptions":["noatime"],"volumeMode":"Filesystem","nodeAffinity":{"required":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"topology.hostpath.csi/node","operator":"In","values":["ref-node"]}]}]}}},"status":{"phase":"Released","lastPhaseTransitionTime":"2026-11-21T15:36:06Z"}}"#;

/// The PV before csi-provisioner removes its finalizer (resourceVersion 386).
const PV_RELEASED_386_BEFORE_PROVISIONER: &str = r#"{"kind":"PersistentVolume","apiVersion":"v1","metadata":{"name":"pvc-dbaa5493-3cc2-45fc-9d93-d1c6eb28560a","uid":"e53a3fcd-672e-40ed-a167-7a8c6bc87f93","resourceVersion":"386","creationTimestamp":"2026-11-21T15:35:48Z","deletionTimestamp":"2026-11-21T15:36:06Z","deletionGracePeriodSeconds":0,"annotations":{"pv.kubernetes.io/provisioned-by":"hostpath.csi.k8s.io","volume.kubernetes.io/provisioner-deletion-secret-name":"","volume.kubernetes.io/provisioner-deletion-secret-namespace":""},"finalizers":["external-provisioner.volume.kubernetes.io/finalizer","kubernetes.io/pv-protection"]},"spec":{"capacity":{"storage":"2Gi"},"csi":{"driver":"hostpath.csi.k8s.io","volumeHandle":"39d5bfc9-e5c1-11f1-9a92-6a32d2d0897e","fsType":"xfs","volumeAttributes":{"fixtures.example.com/color":"blue","storage.kubernetes.io/csiProvisionerIdentity":"1795275348577-3187-hostpath.csi.k8s.io"}},"accessModes":["ReadWriteOnce"],"claimRef":{"kind":"PersistentVolumeClaim","namespace":"fixtures","name":"fx-pvc","uid":"dbaa5493-3cc2-45fc-9d93-d1c6eb28560a","apiVersion":"v1","resourceVersion":"355"},"persistentVolumeReclaimPolicy":"Delete","storageClassName":"fixtures-hostpath","mountOptions":["noatime"],"volumeMode":"Filesystem","nodeAffinity":{"required":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"topology.hostpath.csi/node","operator":"In","values":["ref-node"]}]}]}}},"status":{"phase":"Released","lastPhaseTransitionTime":"2026-11-21T15:36:06Z"}}"#;

/// The PV after the provisioner SMP (stored at 387).
const PV_RELEASED_387: &str = r#"{"kind":"PersistentVolume","apiVersion":"v1","metadata":{"name":"pvc-dbaa5493-3cc2-45fc-9d93-d1c6eb28560a","uid":"e53a3fcd-672e-40ed-a167-7a8c6bc87f93","resourceVersion":"386","creationTimestamp":"2026-11-21T15:35:48Z","deletionTimestamp":"2026-11-21T15:36:06Z","deletionGracePeriodSeconds":0,"annotations":{"pv.kubernetes.io/provisioned-by":"hostpath.csi.k8s.io","volume.kubernetes.io/provisioner-deletion-secret-name":"","volume.kubernetes.io/provisioner-deletion-secret-namespace":""},"finalizers":["kubernetes.io/pv-protection"]},"spec":{"capacity":{"storage":"2Gi"},"csi":{"driver":"hostpath.csi.k8s.io","volumeHandle":"39d5bfc9-e5c1-11f1-9a92-6a32d2d0897e","fsType":"xfs","volumeAttributes":{"fixtures.example.com/color":"blue","storage.kubernetes.io/csiProvisionerIdentity":"1795275348577-3187-hostpath.csi.k8s.io"}},"accessModes":["ReadWriteOnce"],"claimRef":{"kind":"PersistentVolumeClaim","namespace":"fixtures","name":"fx-pvc","uid":"dbaa5493-3cc2-45fc-9d93-d1c6eb28560a","apiVersion":"v1","resourceVersion":"355"},"persistentVolumeReclaimPolicy":"Delete","storageClassName":"fixtures-hostpath","mountOptions":["noatime"],"volumeMode":"Filesystem","nodeAffinity":{"required":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"topology.hostpath.csi/node","operator":"In","values":["ref-node"]}]}]}}},"status":{"phase":"Released","lastPhaseTransitionTime":"2026-11-21T15:36:06Z"}}"#;

/// A PV whose only finalizer is the provisioner one (resourceVersion 444).
const PV_LAST_FINALIZER_444: &str = r#"{"kind":"PersistentVolume","apiVersion":"v1","metadata":{"name":"pvc-b2dd0bd6-243c-474f-9cb0-c80f19faedff","uid":"0ae886ac-9043-4a36-994e-42f63b8fb7ad","resourceVersion":"444","creationTimestamp":"2026-11-21T15:36:23Z","deletionTimestamp":"2026-11-21T15:36:35Z","deletionGracePeriodSeconds":0,"annotations":{"pv.kubernetes.io/provisioned-by":"hostpath.csi.k8s.io","volume.kubernetes.io/provisioner-deletion-secret-name":"","volume.kubernetes.io/provisioner-deletion-secret-namespace":""},"finalizers":["external-provisioner.volume.kubernetes.io/finalizer"]},"spec":{"capacity":{"storage":"1Gi"},"csi":{"driver":"hostpath.csi.k8s.io","volumeHandle":"4e921ffa-e5c1-11f1-9a92-6a32d2d0897e","fsType":"xfs","volumeAttributes":{"fixtures.example.com/color":"blue","storage.kubernetes.io/csiProvisionerIdentity":"1795275348577-3187-hostpath.csi.k8s.io"}},"accessModes":["ReadWriteOnce"],"claimRef":{"kind":"PersistentVolumeClaim","namespace":"fixtures","name":"fx-pvc2","uid":"b2dd0bd6-243c-474f-9cb0-c80f19faedff","apiVersion":"v1","resourceVersion":"399"},"persistentVolumeReclaimPolicy":"Delete","storageClassName":"fixtures-hostpath","mountOptions":["noatime"],"volumeMode":"Filesystem","nodeAffinity":{"required":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"topology.hostpath.csi/node","operator":"In","values":["ref-node"]}]}]}}},"status":{"phase":"Released","lastPhaseTransitionTime":"2026-11-21T15:36:35Z"}}"#;

/// PVC fx-pvc before csi-resizer marks it Resizing (resourceVersion 373).
const PVC_RESIZE_373: &str = r#"{"kind":"PersistentVolumeClaim","apiVersion":"v1","metadata":{"name":"fx-pvc","namespace":"fixtures","uid":"dbaa5493-3cc2-45fc-9d93-d1c6eb28560a","resourceVersion":"373","creationTimestamp":"2026-11-21T15:35:44Z","labels":{"app":"fixtures"},"annotations":{"pv.kubernetes.io/bind-completed":"yes","pv.kubernetes.io/bound-by-controller":"yes","volume.beta.kubernetes.io/storage-provisioner":"hostpath.csi.k8s.io","volume.kubernetes.io/storage-provisioner":"hostpath.csi.k8s.io"},"finalizers":["kubernetes.io/pvc-protection"]},"spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"2Gi"}},"volumeName":"pvc-dbaa5493-3cc2-45fc-9d93-d1c6eb28560a","storageClassName":"fixtures-hostpath","volumeMode":"Filesystem"},"status":{"phase":"Bound","accessModes":["ReadWriteOnce"],"capacity":{"storage":"1Gi"}}}"#;

/// fx-pvc after that SMP (stored at 375; the patch carries resourceVersion 373).
const PVC_RESIZE_375: &str = r#"{"kind":"PersistentVolumeClaim","apiVersion":"v1","metadata":{"name":"fx-pvc","namespace":"fixtures","uid":"dbaa5493-3cc2-45fc-9d93-d1c6eb28560a","resourceVersion":"373","creationTimestamp":"2026-11-21T15:35:44Z","labels":{"app":"fixtures"},"annotations":{"pv.kubernetes.io/bind-completed":"yes","pv.kubernetes.io/bound-by-controller":"yes","volume.beta.kubernetes.io/storage-provisioner":"hostpath.csi.k8s.io","volume.kubernetes.io/storage-provisioner":"hostpath.csi.k8s.io"},"finalizers":["kubernetes.io/pvc-protection"]},"spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"2Gi"}},"volumeName":"pvc-dbaa5493-3cc2-45fc-9d93-d1c6eb28560a","storageClassName":"fixtures-hostpath","volumeMode":"Filesystem"},"status":{"phase":"Bound","accessModes":["ReadWriteOnce"],"capacity":{"storage":"1Gi"},"conditions":[{"type":"Resizing","status":"True","lastProbeTime":null,"lastTransitionTime":"2026-11-21T15:35:59Z"}],"allocatedResources":{"storage":"2Gi"},"allocatedResourceStatuses":{"storage":"ControllerResizeInProgress"}}}"#;

/// fx-pvc before csi-resizer adds FileSystemResizePending (resourceVersion 375).
const PVC_RESIZE_375_BEFORE_FS_PENDING: &str = r#"{"kind":"PersistentVolumeClaim","apiVersion":"v1","metadata":{"name":"fx-pvc","namespace":"fixtures","uid":"dbaa5493-3cc2-45fc-9d93-d1c6eb28560a","resourceVersion":"375","creationTimestamp":"2026-11-21T15:35:44Z","labels":{"app":"fixtures"},"annotations":{"pv.kubernetes.io/bind-completed":"yes","pv.kubernetes.io/bound-by-controller":"yes","volume.beta.kubernetes.io/storage-provisioner":"hostpath.csi.k8s.io","volume.kubernetes.io/storage-provisioner":"hostpath.csi.k8s.io"},"finalizers":["kubernetes.io/pvc-protection"]},"spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"2Gi"}},"volumeName":"pvc-dbaa5493-3cc2-45fc-9d93-d1c6eb28560a","storageClassName":"fixtures-hostpath","volumeMode":"Filesystem"},"status":{"phase":"Bound","accessModes":["ReadWriteOnce"],"capacity":{"storage":"1Gi"},"conditions":[{"type":"Resizing","status":"True","lastProbeTime":null,"lastTransitionTime":"2026-11-21T15:35:59Z"}],"allocatedResources":{"storage":"2Gi"},"allocatedResourceStatuses":{"storage":"ControllerResizeInProgress"}}}"#;

/// fx-pvc after that SMP (stored at 378; the patch carries resourceVersion 375).
const PVC_RESIZE_378: &str = r#"{"kind":"PersistentVolumeClaim","apiVersion":"v1","metadata":{"name":"fx-pvc","namespace":"fixtures","uid":"dbaa5493-3cc2-45fc-9d93-d1c6eb28560a","resourceVersion":"375","creationTimestamp":"2026-11-21T15:35:44Z","labels":{"app":"fixtures"},"annotations":{"pv.kubernetes.io/bind-completed":"yes","pv.kubernetes.io/bound-by-controller":"yes","volume.beta.kubernetes.io/storage-provisioner":"hostpath.csi.k8s.io","volume.kubernetes.io/storage-provisioner":"hostpath.csi.k8s.io"},"finalizers":["kubernetes.io/pvc-protection"]},"spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"2Gi"}},"volumeName":"pvc-dbaa5493-3cc2-45fc-9d93-d1c6eb28560a","storageClassName":"fixtures-hostpath","volumeMode":"Filesystem"},"status":{"phase":"Bound","accessModes":["ReadWriteOnce"],"capacity":{"storage":"1Gi"},"conditions":[{"type":"Resizing","status":"True","lastProbeTime":null,"lastTransitionTime":"2026-11-21T15:35:59Z"},{"type":"FileSystemResizePending","status":"True","lastProbeTime":null,"lastTransitionTime":"2026-11-21T15:35:59Z","message":"Waiting for user to (re-)start a pod to finish file system resize of volume on node."}],"allocatedResources":{"storage":"2Gi"},"allocatedResourceStatuses":{"storage":"NodeResizePending"}}}"#;

/// PVC fx-pvc2 before csi-resizer records the controller resize error (resourceVersion 410).
const PVC2_RESIZE_410: &str = r#"{"kind":"PersistentVolumeClaim","apiVersion":"v1","metadata":{"name":"fx-pvc2","namespace":"fixtures","uid":"b2dd0bd6-243c-474f-9cb0-c80f19faedff","resourceVersion":"410","creationTimestamp":"2026-11-21T15:36:23Z","annotations":{"pv.kubernetes.io/bind-completed":"yes","pv.kubernetes.io/bound-by-controller":"yes","volume.beta.kubernetes.io/storage-provisioner":"hostpath.csi.k8s.io","volume.kubernetes.io/storage-provisioner":"hostpath.csi.k8s.io"},"finalizers":["kubernetes.io/pvc-protection"]},"spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"2Ti"}},"volumeName":"pvc-b2dd0bd6-243c-474f-9cb0-c80f19faedff","storageClassName":"fixtures-hostpath","volumeMode":"Filesystem"},"status":{"phase":"Bound","accessModes":["ReadWriteOnce"],"capacity":{"storage":"1Gi"},"conditions":[{"type":"Resizing","status":"True","lastProbeTime":null,"lastTransitionTime":"2026-11-21T15:36:23Z"}],"allocatedResources":{"storage":"2Ti"},"allocatedResourceStatuses":{"storage":"ControllerResizeInProgress"}}}"#;

/// fx-pvc2 after that SMP (stored at 412).
const PVC2_RESIZE_412: &str = r#"{"kind":"PersistentVolumeClaim","apiVersion":"v1","metadata":{"name":"fx-pvc2","namespace":"fixtures","uid":"b2dd0bd6-243c-474f-9cb0-c80f19faedff","resourceVersion":"410","creationTimestamp":"2026-11-21T15:36:23Z","annotations":{"pv.kubernetes.io/bind-completed":"yes","pv.kubernetes.io/bound-by-controller":"yes","volume.beta.kubernetes.io/storage-provisioner":"hostpath.csi.k8s.io","volume.kubernetes.io/storage-provisioner":"hostpath.csi.k8s.io"},"finalizers":["kubernetes.io/pvc-protection"]},"spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"2Ti"}},"volumeName":"pvc-b2dd0bd6-243c-474f-9cb0-c80f19faedff","storageClassName":"fixtures-hostpath","volumeMode":"Filesystem"},"status":{"phase":"Bound","accessModes":["ReadWriteOnce"],"capacity":{"storage":"1Gi"},"conditions":[{"type":"Resizing","status":"True","lastProbeTime":null,"lastTransitionTime":"2026-11-21T15:36:23Z"},{"type":"ControllerResizeError","status":"True","lastProbeTime":null,"lastTransitionTime":"2026-11-21T15:36:23Z","message":"failed to expand pvc with rpc error: code = OutOfRange desc = Requested capacity 2199023255552 exceeds maximum allowed 1099511627776"}],"allocatedResources":{"storage":"2Ti"},"allocatedResourceStatuses":{"storage":"ControllerResizeInfeasible"}}}"#;

/// fx-pvc2 as stored at 412, target of the no-op resizer patches.
const PVC2_RESIZE_412_AS_STORED: &str = r#"{"kind":"PersistentVolumeClaim","apiVersion":"v1","metadata":{"name":"fx-pvc2","namespace":"fixtures","uid":"b2dd0bd6-243c-474f-9cb0-c80f19faedff","resourceVersion":"412","creationTimestamp":"2026-11-21T15:36:23Z","annotations":{"pv.kubernetes.io/bind-completed":"yes","pv.kubernetes.io/bound-by-controller":"yes","volume.beta.kubernetes.io/storage-provisioner":"hostpath.csi.k8s.io","volume.kubernetes.io/storage-provisioner":"hostpath.csi.k8s.io"},"finalizers":["kubernetes.io/pvc-protection"]},"spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"2Ti"}},"volumeName":"pvc-b2dd0bd6-243c-474f-9cb0-c80f19faedff","storageClassName":"fixtures-hostpath","volumeMode":"Filesystem"},"status":{"phase":"Bound","accessModes":["ReadWriteOnce"],"capacity":{"storage":"1Gi"},"conditions":[{"type":"Resizing","status":"True","lastProbeTime":null,"lastTransitionTime":"2026-11-21T15:36:23Z"},{"type":"ControllerResizeError","status":"True","lastProbeTime":null,"lastTransitionTime":"2026-11-21T15:36:23Z","message":"failed to expand pvc with rpc error: code = OutOfRange desc = Requested capacity 2199023255552 exceeds maximum allowed 1099511627776"}],"allocatedResources":{"storage":"2Ti"},"allocatedResourceStatuses":{"storage":"ControllerResizeInfeasible"}}}"#;

/// csi-resizer Event before its count update (resourceVersion 411).
const EVENT_411: &str = r#"{"kind":"Event","apiVersion":"v1","metadata":{"name":"fx-pvc2.18ea19731b533fe5","namespace":"fixtures","uid":"0cfa1df5-6d5b-4cdb-a8bf-46c39e96b328","resourceVersion":"411","creationTimestamp":"2026-11-21T15:36:23Z"},"involvedObject":{"kind":"PersistentVolumeClaim","namespace":"fixtures","name":"fx-pvc2","uid":"b2dd0bd6-243c-474f-9cb0-c80f19faedff","apiVersion":"v1","resourceVersion":"410"},"reason":"Resizing","message":"External resizer is resizing volume pvc-b2dd0bd6-243c-474f-9cb0-c80f19faedff","source":{"component":"external-resizer hostpath.csi.k8s.io"},"firstTimestamp":"2026-11-21T15:36:23Z","lastTimestamp":"2026-11-21T15:36:23Z","count":1,"type":"Normal","eventTime":null,"reportingComponent":"external-resizer hostpath.csi.k8s.io","reportingInstance":""}"#;

/// The Event after the count SMP (stored at 414).
const EVENT_414: &str = r#"{"kind":"Event","apiVersion":"v1","metadata":{"name":"fx-pvc2.18ea19731b533fe5","namespace":"fixtures","uid":"0cfa1df5-6d5b-4cdb-a8bf-46c39e96b328","resourceVersion":"411","creationTimestamp":"2026-11-21T15:36:23Z"},"involvedObject":{"kind":"PersistentVolumeClaim","namespace":"fixtures","name":"fx-pvc2","uid":"b2dd0bd6-243c-474f-9cb0-c80f19faedff","apiVersion":"v1","resourceVersion":"410"},"reason":"Resizing","message":"External resizer is resizing volume pvc-b2dd0bd6-243c-474f-9cb0-c80f19faedff","source":{"component":"external-resizer hostpath.csi.k8s.io"},"firstTimestamp":"2026-11-21T15:36:23Z","lastTimestamp":"2026-11-21T15:36:23Z","count":2,"type":"Normal","eventTime":null,"reportingComponent":"external-resizer hostpath.csi.k8s.io","reportingInstance":""}"#;

/// VolumeAttachment fx-va as created (resourceVersion 367).
const VA_367: &str = r#"{"kind":"VolumeAttachment","apiVersion":"storage.k8s.io/v1","metadata":{"name":"fx-va","uid":"37a8ef8f-0c67-48ce-b7d5-9eacd8c23f85","resourceVersion":"367","creationTimestamp":"2026-11-21T15:35:54Z","labels":{"fixtures":"true"}},"spec":{"attacher":"hostpath.csi.k8s.io","source":{"persistentVolumeName":"pvc-dbaa5493-3cc2-45fc-9d93-d1c6eb28560a"},"nodeName":"ref-node"},"status":{"attached":false}}"#;

/// fx-va after csi-attacher adds the node-id annotation and its finalizer (stored at 369).
const VA_369: &str = r#"{"kind":"VolumeAttachment","apiVersion":"storage.k8s.io/v1","metadata":{"name":"fx-va","uid":"37a8ef8f-0c67-48ce-b7d5-9eacd8c23f85","resourceVersion":"367","creationTimestamp":"2026-11-21T15:35:54Z","labels":{"fixtures":"true"},"annotations":{"csi.alpha.kubernetes.io/node-id":"ref-node"},"finalizers":["external-attacher/hostpath-csi-k8s-io"]},"spec":{"attacher":"hostpath.csi.k8s.io","source":{"persistentVolumeName":"pvc-dbaa5493-3cc2-45fc-9d93-d1c6eb28560a"},"nodeName":"ref-node"},"status":{"attached":false}}"#;

/// fx-va before csi-attacher marks it attached (resourceVersion 369).
const VA_369_BEFORE_ATTACHED: &str = r#"{"kind":"VolumeAttachment","apiVersion":"storage.k8s.io/v1","metadata":{"name":"fx-va","uid":"37a8ef8f-0c67-48ce-b7d5-9eacd8c23f85","resourceVersion":"369","creationTimestamp":"2026-11-21T15:35:54Z","labels":{"fixtures":"true"},"annotations":{"csi.alpha.kubernetes.io/node-id":"ref-node"},"finalizers":["external-attacher/hostpath-csi-k8s-io"]},"spec":{"attacher":"hostpath.csi.k8s.io","source":{"persistentVolumeName":"pvc-dbaa5493-3cc2-45fc-9d93-d1c6eb28560a"},"nodeName":"ref-node"},"status":{"attached":false}}"#;

/// fx-va after the status merge patch (stored at 370).
const VA_370: &str = r#"{"kind":"VolumeAttachment","apiVersion":"storage.k8s.io/v1","metadata":{"name":"fx-va","uid":"37a8ef8f-0c67-48ce-b7d5-9eacd8c23f85","resourceVersion":"369","creationTimestamp":"2026-11-21T15:35:54Z","labels":{"fixtures":"true"},"annotations":{"csi.alpha.kubernetes.io/node-id":"ref-node"},"finalizers":["external-attacher/hostpath-csi-k8s-io"]},"spec":{"attacher":"hostpath.csi.k8s.io","source":{"persistentVolumeName":"pvc-dbaa5493-3cc2-45fc-9d93-d1c6eb28560a"},"nodeName":"ref-node"},"status":{"attached":true}}"#;

/// fx-va being deleted, before csi-attacher drops its finalizer (resourceVersion 380).
const VA_380: &str = r#"{"kind":"VolumeAttachment","apiVersion":"storage.k8s.io/v1","metadata":{"name":"fx-va","uid":"37a8ef8f-0c67-48ce-b7d5-9eacd8c23f85","resourceVersion":"380","creationTimestamp":"2026-11-21T15:35:54Z","deletionTimestamp":"2026-11-21T15:36:05Z","deletionGracePeriodSeconds":0,"labels":{"fixtures":"true"},"annotations":{"csi.alpha.kubernetes.io/node-id":"ref-node"},"finalizers":["external-attacher/hostpath-csi-k8s-io"]},"spec":{"attacher":"hostpath.csi.k8s.io","source":{"persistentVolumeName":"pvc-dbaa5493-3cc2-45fc-9d93-d1c6eb28560a"},"nodeName":"ref-node"},"status":{"attached":true}}"#;

/// fx-va-fail with an attachError (resourceVersion 421).
const VA_FAIL_421: &str = r#"{"kind":"VolumeAttachment","apiVersion":"storage.k8s.io/v1","metadata":{"name":"fx-va-fail","uid":"8e7410aa-6c83-483d-b1f6-d5ab1a23ba12","resourceVersion":"421","creationTimestamp":"2026-11-21T15:36:23Z","annotations":{"csi.alpha.kubernetes.io/node-id":"ref-node"},"finalizers":["external-attacher/hostpath-csi-k8s-io"]},"spec":{"attacher":"hostpath.csi.k8s.io","source":{"persistentVolumeName":"fx-static-pv"},"nodeName":"ref-node"},"status":{"attached":false,"attachError":{"time":"2026-11-21T15:36:23Z","message":"rpc error: code = NotFound desc = rpc error: code = NotFound desc = volume id fx-no-such-volume does not exist in the volumes list","errorCode":5}}}"#;

/// fx-va-fail after csi-attacher refreshes only attachError.time (stored at 424).
const VA_FAIL_424: &str = r#"{"kind":"VolumeAttachment","apiVersion":"storage.k8s.io/v1","metadata":{"name":"fx-va-fail","uid":"8e7410aa-6c83-483d-b1f6-d5ab1a23ba12","resourceVersion":"421","creationTimestamp":"2026-11-21T15:36:23Z","annotations":{"csi.alpha.kubernetes.io/node-id":"ref-node"},"finalizers":["external-attacher/hostpath-csi-k8s-io"]},"spec":{"attacher":"hostpath.csi.k8s.io","source":{"persistentVolumeName":"fx-static-pv"},"nodeName":"ref-node"},"status":{"attached":false,"attachError":{"time":"2026-11-21T15:36:24Z","message":"rpc error: code = NotFound desc = rpc error: code = NotFound desc = volume id fx-no-such-volume does not exist in the volumes list","errorCode":5}}}"#;
