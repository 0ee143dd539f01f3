//! deploy/ as an operator installs it: every overlay and base renders with `kubectl kustomize`,
//! the rendered objects are valid for their schema and accepted by the in-memory API server
//! where it serves the kind, every container is hardened, the two pod shapes are upstream's,
//! and every flag a manifest passes is accepted by the binary it names.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failed setup step should panic"
)]

use std::path::{Path, PathBuf};
use std::process::Command;

use csi_common::logging::error_chain;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use testbed_deploy_check::render::{self, describe, of_kind};
use testbed_deploy_check::workload::{self, BINARIES, Container};

/// Every kustomization under deploy/ an operator can build.
const KUSTOMIZATIONS: &[&str] = &[
    "overlays/namespace",
    "overlays/controller",
    "overlays/node",
    "overlays/controller-monitored",
    "provisioner",
    "attacher",
    "resizer",
];

fn rendered(dir: &str) -> Vec<Value> {
    let path = testbed_deploy_check::workspace_root()
        .join("deploy")
        .join(dir);
    render::kustomize(&path).unwrap_or_else(|e| panic!("{}", error_chain(&e)))
}

fn all_rendered() -> Vec<(&'static str, Vec<Value>)> {
    KUSTOMIZATIONS.iter().map(|d| (*d, rendered(d))).collect()
}

/// Where `cargo test --workspace` put the workspace's binaries (`target/<profile>`).
fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_owned()
}

fn binary(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    assert!(
        path.is_file(),
        "{} is missing: build the workspace's binaries first (cargo build --workspace --bins; cargo test --workspace builds them too)",
        path.display()
    );
    path
}

/// Every directory under deploy/ holding a kustomization.yaml, relative to deploy/, with the
/// file's text.
fn kustomization_dirs(dir: &Path, deploy: &Path, out: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            kustomization_dirs(&path, deploy, out);
        } else if path.file_name().is_some_and(|n| n == "kustomization.yaml") {
            let relative = dir.strip_prefix(deploy).unwrap().display().to_string();
            out.push((relative, std::fs::read_to_string(&path).unwrap()));
        }
    }
}

#[test]
fn every_kustomization_under_deploy_is_rendered_or_used_by_one_that_is() {
    let deploy = testbed_deploy_check::workspace_root().join("deploy");
    let mut found = Vec::new();
    kustomization_dirs(&deploy, &deploy, &mut found);
    let mut used_components = Vec::new();
    for dir in KUSTOMIZATIONS {
        let text = std::fs::read_to_string(deploy.join(dir).join("kustomization.yaml")).unwrap();
        let parsed: Value = serde_saphyr::from_str(&text).unwrap();
        for component in parsed["components"].as_array().into_iter().flatten() {
            let path = deploy.join(dir).join(component.as_str().unwrap());
            used_components.push(path.canonicalize().unwrap());
        }
    }
    for (dir, text) in found {
        if text.contains("kind: Component") {
            let path = deploy.join(&dir).canonicalize().unwrap();
            assert!(
                used_components.contains(&path),
                "component {dir} is used by no checked kustomization"
            );
        } else {
            assert!(
                KUSTOMIZATIONS.contains(&dir.as_str()),
                "{dir} is not in KUSTOMIZATIONS: the checks would skip it"
            );
        }
    }
}

#[test]
fn every_overlay_and_base_renders() {
    for (dir, objects) in all_rendered() {
        assert!(!objects.is_empty(), "{dir} renders no objects");
        for object in &objects {
            assert!(
                object["apiVersion"].is_string() && object["metadata"]["name"].is_string(),
                "{dir}: {object}"
            );
        }
    }
}

#[test]
fn every_container_is_hardened() {
    let mut findings = Vec::new();
    let mut checked = 0;
    for (dir, objects) in all_rendered() {
        for container in workload::containers(&objects) {
            checked += 1;
            findings.extend(
                container
                    .hardening_findings()
                    .into_iter()
                    .map(|f| format!("{dir}: {f}")),
            );
        }
    }
    assert_eq!(findings, Vec::<String>::new());
    assert!(checked >= 8, "only {checked} containers were checked");
}

fn controller_sidecars(objects: &[Value]) -> Vec<Container<'_>> {
    workload::containers(objects)
        .into_iter()
        .filter(|c| {
            matches!(
                c.binary(),
                Some("csi-provisioner" | "csi-attacher" | "csi-resizer")
            )
        })
        .collect()
}

#[test]
fn the_controller_pod_runs_three_leader_elected_replicas_with_metrics_and_a_budget() {
    let objects = rendered("overlays/controller");
    let deployment = of_kind(&objects, "Deployment")[0];
    assert_eq!(deployment["spec"]["replicas"], 3);
    let sidecars = controller_sidecars(&objects);
    let mut names: Vec<_> = sidecars.iter().filter_map(Container::binary).collect();
    names.sort_unstable();
    assert_eq!(names, ["csi-attacher", "csi-provisioner", "csi-resizer"]);
    let mut ports = Vec::new();
    for sidecar in &sidecars {
        let args = sidecar.args();
        assert!(
            args.iter().any(|a| a == "--leader-election"),
            "{}",
            sidecar.name()
        );
        let port = sidecar.http_port().expect("--http-endpoint");
        ports.push(port);
        let probe = &sidecar.container["livenessProbe"]["httpGet"];
        assert_eq!(
            probe["path"],
            "/healthz/leader-election",
            "{}",
            sidecar.name()
        );
        let probe_port = sidecar.port_number(probe["port"].as_str().unwrap());
        assert_eq!(probe_port, Some(u64::from(port)), "{}", sidecar.name());
        let env = sidecar.container["env"].as_array().unwrap();
        assert!(
            env.iter().any(|e| e["name"] == "POD_NAMESPACE"
                && e["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"),
            "{}: the Lease must live in the pod's namespace",
            sidecar.name()
        );
    }
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), 3, "each sidecar needs its own metrics port");
    let labels = &deployment["spec"]["template"]["metadata"]["labels"];
    let budget = of_kind(&objects, "PodDisruptionBudget")[0];
    for (key, value) in budget["spec"]["selector"]["matchLabels"]
        .as_object()
        .unwrap()
    {
        assert_eq!(
            &labels[key], value,
            "the budget selects the controller pods"
        );
    }
    assert!(budget["spec"]["minAvailable"].as_u64().unwrap() >= 2);
    // The pod runs under one account, which every sidecar's bindings name.
    let account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
        .as_str()
        .unwrap();
    for kind in ["ClusterRoleBinding", "RoleBinding"] {
        for binding in of_kind(&objects, kind) {
            assert_eq!(
                binding["subjects"][0]["name"],
                account,
                "{}",
                describe(binding)
            );
        }
    }
    let accounts: Vec<_> = of_kind(&objects, "ServiceAccount")
        .into_iter()
        .map(describe)
        .collect();
    assert_eq!(accounts, [format!("ServiceAccount/{account}")]);
}

#[test]
fn the_node_plugin_registers_through_kubelets_paths() {
    let objects = rendered("overlays/node");
    let daemonset = of_kind(&objects, "DaemonSet")[0];
    let pod = &daemonset["spec"]["template"]["spec"];
    let host_path = |volume: &str| {
        pod["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == volume)
            .and_then(|v| v["hostPath"]["path"].as_str())
            .unwrap_or_else(|| panic!("hostPath volume {volume}"))
            .to_owned()
    };
    let containers = workload::containers(&objects);
    let registrar = containers
        .iter()
        .find(|c| c.binary() == Some("csi-node-driver-registrar"))
        .unwrap();
    let mounts = registrar.container["volumeMounts"].as_array().unwrap();
    let mount_of = |path: &str| {
        mounts
            .iter()
            .find(|m| m["mountPath"] == path)
            .and_then(|m| m["name"].as_str())
            .unwrap_or_else(|| panic!("a volume mounted at {path}"))
    };
    assert_eq!(
        host_path(mount_of("/registration")),
        "/var/lib/kubelet/plugins_registry/"
    );
    let socket_dir = host_path(mount_of("/csi"));
    let registration_path = registrar
        .args()
        .iter()
        .find_map(|a| {
            a.strip_prefix("--kubelet-registration-path=")
                .map(str::to_owned)
        })
        .unwrap();
    assert!(
        socket_dir.starts_with("/var/lib/kubelet/plugins/"),
        "{socket_dir}"
    );
    assert_eq!(registration_path, format!("{socket_dir}csi.sock"));
    let probe = registrar.container["startupProbe"]["exec"]["command"]
        .as_array()
        .unwrap();
    assert_eq!(probe[0], "/csi-node-driver-registrar");
    assert!(probe.contains(&Value::from(format!(
        "--kubelet-registration-path={registration_path}"
    ))));
    assert!(probe.contains(&Value::from("--mode=kubelet-registration-probe")));
    assert_eq!(
        registrar.container["livenessProbe"]["httpGet"]["path"],
        "/healthz"
    );
    assert_eq!(pod["automountServiceAccountToken"], false);
}

/// Deserializes `object` as `K` and back: a field the schema does not know (a typo, a wrong
/// nesting) disappears, as `kubectl apply --validate=strict` would report it.
fn round_trips<K: DeserializeOwned + Serialize>(object: &Value) -> Result<(), String> {
    let typed: K = serde_json::from_value(object.clone()).map_err(|e| e.to_string())?;
    let back = serde_json::to_value(&typed).map_err(|e| e.to_string())?;
    if &back == object {
        Ok(())
    } else {
        Err(format!(
            "fields lost: rendered\n{object:#}\nschema keeps\n{back:#}"
        ))
    }
}

#[test]
fn every_rendered_object_keeps_to_its_schema() {
    use k8s_openapi::api::{apps, core, networking, policy, rbac};
    for (dir, objects) in all_rendered() {
        for object in &objects {
            let kind = object["kind"].as_str().unwrap();
            let result = match kind {
                "Namespace" => round_trips::<core::v1::Namespace>(object),
                "ServiceAccount" => round_trips::<core::v1::ServiceAccount>(object),
                "Role" => round_trips::<rbac::v1::Role>(object),
                "ClusterRole" => round_trips::<rbac::v1::ClusterRole>(object),
                "RoleBinding" => round_trips::<rbac::v1::RoleBinding>(object),
                "ClusterRoleBinding" => round_trips::<rbac::v1::ClusterRoleBinding>(object),
                "Deployment" => round_trips::<apps::v1::Deployment>(object),
                "DaemonSet" => round_trips::<apps::v1::DaemonSet>(object),
                "PodDisruptionBudget" => round_trips::<policy::v1::PodDisruptionBudget>(object),
                "NetworkPolicy" => round_trips::<networking::v1::NetworkPolicy>(object),
                "PodMonitor" => pod_monitor_matches(object, &objects),
                other => Err(format!("no schema check for kind {other}")),
            };
            if let Err(why) = result {
                panic!("{dir}: {}: {why}", describe(object));
            }
        }
    }
}

/// The PodMonitor (a Prometheus Operator CRD, not in k8s-openapi): it selects the controller
/// pods and scrapes named ports they have.
fn pod_monitor_matches(monitor: &Value, objects: &[Value]) -> Result<(), String> {
    let deployment = of_kind(objects, "Deployment")[0];
    let labels = &deployment["spec"]["template"]["metadata"]["labels"];
    for (key, value) in monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .ok_or("no selector")?
    {
        if &labels[key] != value {
            return Err(format!("selector {key}={value} does not match the pods"));
        }
    }
    let containers = workload::containers(objects);
    for endpoint in monitor["spec"]["podMetricsEndpoints"]
        .as_array()
        .ok_or("no endpoints")?
    {
        let port = endpoint["port"].as_str().ok_or("endpoint without port")?;
        if !containers.iter().any(|c| c.port_number(port).is_some()) {
            return Err(format!("no container port named {port}"));
        }
    }
    Ok(())
}

#[tokio::test]
async fn the_kinds_the_api_server_serves_are_accepted_by_it() {
    use kube::api::{Api, DynamicObject, PostParams};
    use kube::discovery::Discovery;
    let server = testbed_cluster::apiserver::ApiServer::new();
    let client = server.client();
    let discovery = Discovery::new(client.clone()).run().await.unwrap();
    let mut accepted = Vec::new();
    for (dir, objects) in all_rendered() {
        for object in objects {
            let gvk = kube::core::GroupVersionKind::try_from(
                &serde_json::from_value::<kube::core::TypeMeta>(object.clone()).unwrap(),
            )
            .unwrap();
            let Some((resource, _)) = discovery.resolve_gvk(&gvk) else {
                continue;
            };
            let dynamic: DynamicObject = serde_json::from_value(object.clone()).unwrap();
            let api: Api<DynamicObject> = match object["metadata"]["namespace"].as_str() {
                Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
                None => Api::all_with(client.clone(), &resource),
            };
            match api.create(&PostParams::default(), &dynamic).await {
                Ok(_) => {}
                // Both overlays install the same Namespace.
                Err(kube::Error::Api(e)) if e.code == 409 && gvk.kind == "Namespace" => {}
                Err(e) => panic!("{dir}: {} refused: {e}", describe(&object)),
            }
            accepted.push(describe(&object));
        }
    }
    assert!(
        accepted.iter().any(|a| a == "Namespace/csi-driver"),
        "nothing was served: {accepted:?}"
    );
}

/// Runs `binary args... --help`: clap parses the arguments left to right and fails with exit
/// code 2 on an unknown flag or a bad value before it reaches `--help`.
fn accepts(binary: &Path, args: &[String]) -> Result<(), String> {
    let output = Command::new(binary)
        .args(args)
        .arg("--help")
        .output()
        .unwrap();
    if output.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

#[test]
fn every_flag_in_the_manifests_is_accepted_by_its_binary() {
    let mut checked = Vec::new();
    for (dir, objects) in all_rendered() {
        for container in workload::containers(&objects) {
            let image = container.container["image"].as_str().unwrap();
            let Some(name) = container.binary() else {
                assert!(
                    !image.contains("csi-sidecars-rs"),
                    "{dir}: image {image} names no sidecar binary"
                );
                continue;
            };
            let args = container.args();
            if let Err(why) = accepts(&binary(name), &args) {
                panic!("{dir}: {name} refuses {args:?}: {why}");
            }
            checked.push(name);
            // Exec probes run the image's binary at its upstream path.
            for probe in ["startupProbe", "livenessProbe", "readinessProbe"] {
                let Some(command) = container.container[probe]["exec"]["command"].as_array() else {
                    continue;
                };
                let words: Vec<String> = command
                    .iter()
                    .map(|w| w.as_str().unwrap().to_owned())
                    .collect();
                assert_eq!(words[0], format!("/{name}"), "{dir}: {probe}");
                let status = Command::new(binary(name))
                    .args(&words[1..])
                    .status()
                    .unwrap();
                assert!(status.success(), "{dir}: {probe} {words:?} exits {status}");
            }
        }
    }
    for name in BINARIES {
        assert!(checked.contains(&name), "no manifest runs {name}");
    }
}
