use k8s_openapi::api::core::v1::{ConfigMap, Node};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;

fn map(namespace: &str, name: &str, rv: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            resource_version: Some(rv.into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn node(name: &str) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn rv<K: Resource>(object: Option<Arc<K>>) -> Option<String> {
    object.and_then(|o| o.meta().resource_version.clone())
}

#[test]
fn objects_are_found_by_namespace_and_name_only() {
    let (store, mut writer) = store();
    assert!(writer.apply(map("a", "x", "1")).1.is_none());
    writer.apply(map("b", "x", "2"));
    let (_, replaced) = writer.apply(map("a", "x", "3"));
    assert_eq!(rv(replaced), Some("1".into()), "same namespace and name");
    assert_eq!(store.len(), 2);
    assert_eq!(
        rv(store.get(&ObjectRef::new("x").within("a"))),
        Some("3".into())
    );
    assert_eq!(
        rv(store.get(&ObjectRef::new("x").within("b"))),
        Some("2".into())
    );
    assert!(store.get(&ObjectRef::new("x").within("c")).is_none());
    assert!(
        store.get(&ObjectRef::new("x")).is_none(),
        "no namespace is another key"
    );
    // The resourceVersion and uid a reference may carry are not compared.
    let mut stale = ObjectRef::new("x").within("a");
    stale.extra.resource_version = Some("1".into());
    stale.extra.uid = Some("other".into());
    assert_eq!(rv(store.get(&stale)), Some("3".into()));
    writer.delete(&map("a", "x", "4"));
    assert!(store.get(&ObjectRef::new("x").within("a")).is_none());
    assert_eq!(store.len(), 1);
}

#[test]
fn cluster_scoped_objects_are_found_by_name() {
    let (store, mut writer) = store();
    writer.apply(node("n1"));
    writer.apply(node("n2"));
    assert!(store.get(&ObjectRef::<Node>::new("n1")).is_some());
    let found = store.find(|n| n.metadata.name.as_deref() == Some("n2"));
    assert_eq!(
        found.and_then(|n| n.metadata.name.clone()).as_deref(),
        Some("n2")
    );
    assert!(store.find(|n| n.metadata.name.is_none()).is_none());
    writer.delete(&node("n1"));
    assert!(store.get(&ObjectRef::<Node>::new("n1")).is_none());
    assert_eq!(store.state().len(), 1);
}

#[test]
fn a_relist_is_seen_only_when_complete_and_returns_the_state_it_replaced() {
    let (store, mut writer) = store();
    writer.list_start();
    writer.list_apply(map("ns", "kept", "1"));
    writer.list_apply(map("ns", "gone", "2"));
    assert!(
        store.is_empty(),
        "the first list is not visible before it is complete"
    );
    assert!(writer.list_done().drain().is_empty());
    assert_eq!(store.len(), 2);

    writer.list_start();
    writer.list_apply(map("ns", "kept", "3"));
    writer.list_apply(map("ns", "new", "4"));
    assert_eq!(
        rv(store.get(&ObjectRef::new("gone").within("ns"))),
        Some("2".into()),
        "readers keep the previous state during a re-list"
    );
    let mut before = writer.list_done();
    assert_eq!(
        rv(store.get(&ObjectRef::new("kept").within("ns"))),
        Some("3".into())
    );
    assert!(store.get(&ObjectRef::new("gone").within("ns")).is_none());
    assert_eq!(rv(before.remove(&map("ns", "kept", "3"))), Some("1".into()));
    let rest: Vec<_> = before.drain().into_iter().map(|o| rv(Some(o))).collect();
    assert_eq!(rest, [Some("2".into())]);
}

#[test]
fn many_objects_stay_findable_as_the_table_grows_and_shrinks() {
    let (store, mut writer) = store();
    let key = |i: usize| (format!("ns{}", i % 7), format!("o{i}"));
    for i in 0..5000 {
        let (namespace, name) = key(i);
        writer.apply(map(&namespace, &name, &i.to_string()));
    }
    assert_eq!(store.len(), 5000);
    for i in 0..5000 {
        let (namespace, name) = key(i);
        let found = store.get(&ObjectRef::new(&name).within(&namespace));
        assert_eq!(rv(found), Some(i.to_string()));
    }
    for i in (0..5000).step_by(2) {
        let (namespace, name) = key(i);
        writer.delete(&map(&namespace, &name, ""));
    }
    assert_eq!(store.len(), 2500);
    assert!(store.get(&ObjectRef::new("o2").within("ns2")).is_none());
    assert_eq!(
        rv(store.get(&ObjectRef::new("o3").within("ns3"))),
        Some("3".into())
    );
}

#[tokio::test]
async fn the_store_is_ready_after_the_first_complete_list() {
    let (store, mut writer) = store::<ConfigMap>();
    writer.list_start();
    writer.list_apply(map("ns", "a", "1"));
    let waiting = tokio::spawn({
        let store = store.clone();
        async move { store.wait_until_ready().await }
    });
    tokio::task::yield_now().await;
    assert!(
        !waiting.is_finished(),
        "not ready before the list is complete"
    );
    writer.list_done();
    waiting.await.unwrap().expect("ready");
    // Ready stays ready, through a re-list too.
    writer.list_start();
    store.wait_until_ready().await.expect("still ready");
}

#[tokio::test]
async fn waiting_ends_with_an_error_when_the_informer_stops_before_its_first_list() {
    let (store, writer) = store::<ConfigMap>();
    drop(writer);
    assert!(store.wait_until_ready().await.is_err());
}

/// One step of the property test: what an informer's watch can deliver.
#[derive(Debug, Clone)]
enum Step {
    Apply(Option<u8>, u8, u16),
    Delete(Option<u8>, u8),
    ListStart,
    ListApply(Option<u8>, u8, u16),
    ListDone,
}

fn step() -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    // Few namespaces and names, so steps hit the same objects often; `None` is a
    // cluster-scoped object, which must not collide with a namespaced one of the same name.
    let namespace = prop_oneof![Just(None), (0u8..3).prop_map(Some)];
    prop_oneof![
        4 => (namespace.clone(), 0u8..6, any::<u16>()).prop_map(|(n, o, v)| Step::Apply(n, o, v)),
        2 => (namespace.clone(), 0u8..6).prop_map(|(n, o)| Step::Delete(n, o)),
        1 => Just(Step::ListStart),
        3 => (namespace, 0u8..6, any::<u16>()).prop_map(|(n, o, v)| Step::ListApply(n, o, v)),
        1 => Just(Step::ListDone),
    ]
}

fn object(namespace: Option<u8>, name: u8, version: u16) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(format!("o{name}")),
            namespace: namespace.map(|n| format!("ns{n}")),
            resource_version: Some(version.to_string()),
            ..Default::default()
        },
        ..Default::default()
    }
}

type Model = std::collections::BTreeMap<(Option<u8>, u8), u16>;

fn contents(objects: &[Arc<ConfigMap>]) -> Vec<(Option<String>, String, String)> {
    let mut all: Vec<_> = objects
        .iter()
        .map(|o| {
            let meta = &o.metadata;
            (
                meta.namespace.clone(),
                meta.name.clone().unwrap_or_default(),
                meta.resource_version.clone().unwrap_or_default(),
            )
        })
        .collect();
    all.sort();
    all
}

fn expected(model: &Model) -> Vec<(Option<String>, String, String)> {
    let mut all: Vec<_> = model
        .iter()
        .map(|((n, o), v)| (n.map(|n| format!("ns{n}")), format!("o{o}"), v.to_string()))
        .collect();
    all.sort();
    all
}

proptest::proptest! {
    #![proptest_config(proptest::test_runner::Config {
        cases: 500,
        rng_seed: proptest::test_runner::RngSeed::Fixed(13),
        failure_persistence: None,
        ..proptest::test_runner::Config::default()
    })]

    /// The store against a map: after every step it holds what the map holds, finds each
    /// object by its namespace and name, returns what an apply replaced, and a completed list
    /// hands back exactly the state it replaced.
    #[test]
    fn the_store_behaves_as_a_map_with_a_buffered_relist(
        steps in proptest::collection::vec(step(), 1..80)
    ) {
        let (store, mut writer) = store::<ConfigMap>();
        let mut model = Model::new();
        let mut relist: Option<Model> = None;
        for step in steps {
            match step {
                Step::Apply(n, o, v) => {
                    let (_, old) = writer.apply(object(n, o, v));
                    let want = model.insert((n, o), v).map(|v| v.to_string());
                    proptest::prop_assert_eq!(rv(old), want);
                }
                Step::Delete(n, o) => {
                    writer.delete(&object(n, o, 0));
                    model.remove(&(n, o));
                }
                Step::ListStart => {
                    writer.list_start();
                    relist = Some(Model::new());
                }
                Step::ListApply(n, o, v) => {
                    writer.list_apply(object(n, o, v));
                    relist.get_or_insert_with(Model::new).insert((n, o), v);
                }
                Step::ListDone => {
                    let mut before = writer.list_done();
                    let replaced = std::mem::replace(&mut model, relist.take().unwrap_or_default());
                    proptest::prop_assert_eq!(contents(&before.drain()), expected(&replaced));
                }
            }
            proptest::prop_assert_eq!(contents(&store.state()), expected(&model));
            proptest::prop_assert_eq!(store.len(), model.len());
            for n in [None, Some(0), Some(1), Some(2)] {
                for o in 0..6 {
                    let name = format!("o{o}");
                    let key = match n {
                        Some(n) => ObjectRef::new(&name).within(&format!("ns{n}")),
                        None => ObjectRef::new(&name),
                    };
                    let want = model.get(&(n, o)).map(u16::to_string);
                    proptest::prop_assert_eq!(rv(store.get(&key)), want);
                }
            }
        }
    }
}
