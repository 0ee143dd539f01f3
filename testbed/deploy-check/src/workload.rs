//! The pods of the rendered Deployments and DaemonSets: which sidecar binary each container
//! runs with which arguments, and which hardening rules a container breaks.
//!
//! The rules are the issue's: every container runs with seccomp `RuntimeDefault`, a read-only
//! root file system, no privilege escalation, every capability dropped and memory requests and
//! limits; as non-root unless it is listed in [`ROOT_EXCEPTIONS`]; privileged only if it is the
//! node plugin's driver container.

use std::collections::BTreeMap;

use serde_json::Value;

/// The sidecar binaries the images ship, each at `/<binary>` (as upstream's images).
pub const BINARIES: [&str; 5] = [
    "csi-provisioner",
    "csi-attacher",
    "csi-resizer",
    "csi-node-driver-registrar",
    "livenessprobe",
];

/// (workload, container, why) of containers that run as root on purpose, with every
/// capability dropped.
pub const ROOT_EXCEPTIONS: &[(&str, &str, &str)] = &[
    (
        "csi-node",
        "csi-driver",
        "the node plugin mounts volumes (privileged)",
    ),
    (
        "csi-node",
        "csi-node-driver-registrar",
        "creates its socket in kubelet's root-owned plugins_registry",
    ),
    (
        "csi-node",
        "liveness-probe",
        "connects to the root driver's 0755 socket",
    ),
];

/// The only container allowed to be privileged: the node plugin's driver.
pub const PRIVILEGED: (&str, &str) = ("csi-node", "csi-driver");

/// One container of a rendered workload.
#[derive(Debug, Clone)]
pub struct Container<'a> {
    /// Name of the Deployment or DaemonSet.
    pub workload: String,
    /// The pod template's spec.
    pub pod: &'a Value,
    /// The container.
    pub container: &'a Value,
}

impl Container<'_> {
    /// The container's name.
    pub fn name(&self) -> &str {
        self.container["name"].as_str().unwrap_or_default()
    }

    /// The sidecar binary its image holds (the image name's last path segment, tag removed),
    /// if it is one of [`BINARIES`].
    pub fn binary(&self) -> Option<&'static str> {
        let image = self.container["image"].as_str()?;
        let last = image.rsplit('/').next()?;
        let name = last.split([':', '@']).next()?;
        BINARIES.into_iter().find(|b| *b == name)
    }

    /// Its args with `$(VAR)` replaced by the container's plain `env` values, as kubelet
    /// expands them.
    pub fn args(&self) -> Vec<String> {
        let env: BTreeMap<&str, &str> = self.container["env"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| Some((e["name"].as_str()?, e["value"].as_str()?)))
            .collect();
        self.container["args"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(|arg| {
                env.iter().fold(arg.to_owned(), |arg, (k, v)| {
                    arg.replace(&format!("$({k})"), v)
                })
            })
            .collect()
    }

    /// The `--http-endpoint` port, if the args name one.
    pub fn http_port(&self) -> Option<u16> {
        self.args()
            .iter()
            .find_map(|a| a.strip_prefix("--http-endpoint="))
            .and_then(|endpoint| endpoint.rsplit(':').next()?.parse().ok())
    }

    /// The port number of the named container port `name`.
    pub fn port_number(&self, name: &str) -> Option<u64> {
        self.container["ports"]
            .as_array()?
            .iter()
            .find(|p| p["name"] == name)?["containerPort"]
            .as_u64()
    }

    /// The hardening rules this container breaks, as messages (empty when it keeps them all).
    pub fn hardening_findings(&self) -> Vec<String> {
        let sc = &self.container["securityContext"];
        let pod_sc = &self.pod["securityContext"];
        let key = (self.workload.as_str(), self.name());
        let mut findings = Vec::new();
        let mut require = |ok: bool, rule: &str| {
            if !ok {
                findings.push(format!("{}/{}: {rule}", key.0, key.1));
            }
        };
        let privileged = sc["privileged"] == true;
        require(!privileged || key == PRIVILEGED, "privileged");
        let seccomp = if sc["seccompProfile"].is_null() {
            &pod_sc["seccompProfile"]
        } else {
            &sc["seccompProfile"]
        };
        require(
            seccomp["type"] == "RuntimeDefault",
            "seccomp is not RuntimeDefault",
        );
        if !privileged {
            require(
                sc["readOnlyRootFilesystem"] == true,
                "root file system writable",
            );
            require(
                sc["allowPrivilegeEscalation"] == false,
                "privilege escalation allowed",
            );
            let drops = sc["capabilities"]["drop"].as_array();
            require(
                drops.is_some_and(|d| d.iter().any(|c| c == "ALL")),
                "capabilities not all dropped",
            );
            require(sc["capabilities"]["add"].is_null(), "capabilities added");
            let resources = &self.container["resources"];
            require(
                resources["requests"]["memory"].is_string()
                    && resources["limits"]["memory"].is_string(),
                "no memory request and limit",
            );
        }
        let non_root = if sc["runAsNonRoot"].is_null() {
            pod_sc["runAsNonRoot"] == true
        } else {
            sc["runAsNonRoot"] == true
        };
        let excepted = ROOT_EXCEPTIONS.iter().any(|(w, c, _)| (*w, *c) == key);
        require(non_root || excepted, "may run as root");
        findings
    }
}

/// Every container (init containers included) of every Deployment and DaemonSet in `objects`.
pub fn containers(objects: &[Value]) -> Vec<Container<'_>> {
    objects
        .iter()
        .filter(|o| o["kind"] == "Deployment" || o["kind"] == "DaemonSet")
        .flat_map(|o| {
            let pod = &o["spec"]["template"]["spec"];
            let workload = o["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            ["initContainers", "containers"]
                .into_iter()
                .flat_map(move |field| pod[field].as_array().into_iter().flatten())
                .map(move |container| Container {
                    workload: workload.clone(),
                    pod,
                    container,
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn deployment(pod_sc: &Value, sc: &Value) -> Value {
        json!({"kind": "Deployment", "metadata": {"name": "csi-controller"},
            "spec": {"template": {"spec": {"securityContext": pod_sc, "containers": [{
                "name": "csi-provisioner",
                "image": "example.com/x/csi-provisioner:v1",
                "args": ["--csi-address=$(ADDRESS)", "--http-endpoint=:8080"],
                "env": [{"name": "ADDRESS", "value": "/csi/csi.sock"}],
                "resources": {"requests": {"memory": "32Mi"}, "limits": {"memory": "128Mi"}},
                "securityContext": sc}]}}}})
    }

    fn hardened() -> Value {
        json!({"readOnlyRootFilesystem": true, "allowPrivilegeEscalation": false,
            "capabilities": {"drop": ["ALL"]}})
    }

    #[test]
    fn a_hardened_container_has_no_findings_and_its_args_are_expanded() {
        let objects = [deployment(
            &json!({"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}}),
            &hardened(),
        )];
        let all = containers(&objects);
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].binary(), Some("csi-provisioner"));
        assert_eq!(
            all[0].args(),
            ["--csi-address=/csi/csi.sock", "--http-endpoint=:8080"]
        );
        assert_eq!(all[0].http_port(), Some(8080));
        assert_eq!(all[0].hardening_findings(), Vec::<String>::new());
    }

    #[test]
    fn each_missing_rule_is_reported() {
        let cases = [
            (
                json!({"seccompProfile": {"type": "RuntimeDefault"}}),
                hardened(),
                "may run as root",
            ),
            (
                json!({"runAsNonRoot": true}),
                hardened(),
                "seccomp is not RuntimeDefault",
            ),
            (
                json!({"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}}),
                json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}),
                "root file system writable",
            ),
            (
                json!({"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}}),
                json!({"readOnlyRootFilesystem": true, "allowPrivilegeEscalation": false,
                    "capabilities": {"drop": ["NET_RAW"]}}),
                "capabilities not all dropped",
            ),
            (
                json!({"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}}),
                json!({"privileged": true}),
                "privileged",
            ),
        ];
        for (pod_sc, sc, rule) in cases {
            let objects = [deployment(&pod_sc, &sc)];
            let findings = containers(&objects)[0].hardening_findings();
            assert_eq!(
                findings,
                [format!("csi-controller/csi-provisioner: {rule}")],
                "{rule}"
            );
        }
    }
}
