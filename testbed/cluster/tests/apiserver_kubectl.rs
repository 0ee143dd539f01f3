//! kubectl against the listening in-memory API server with its generated kubeconfig:
//! `kubectl create -f` and `kubectl get pvc,pv -A`. kubectl is part of this project's machine
//! image; without it the test fails rather than passing unchecked.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failed step should panic with its error"
)]

use std::path::Path;
use std::time::Duration;

use testbed_cluster::apiserver::ApiServer;

const KUBECTL: &str = "/usr/bin/kubectl";

const MANIFEST: &str = r"apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: kubectl-claim
  namespace: default
spec:
  accessModes: [ReadWriteOnce]
  resources:
    requests:
      storage: 1Gi
---
apiVersion: v1
kind: PersistentVolume
metadata:
  name: kubectl-volume
spec:
  accessModes: [ReadWriteOnce]
  capacity:
    storage: 1Gi
  csi:
    driver: hostpath.csi.k8s.io
    volumeHandle: vol-1
";

async fn kubectl(kubeconfig: &Path, args: &[&str]) -> (bool, String, String) {
    let mut cmd = tokio::process::Command::new(KUBECTL);
    cmd.arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_mins(1), cmd.output())
        .await
        .expect("kubectl finished within 60 s")
        .expect("kubectl runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_creates_and_lists_pvcs_and_pvs() {
    assert!(
        Path::new(KUBECTL).exists(),
        "{KUBECTL} is not installed (the machine image has it)"
    );
    let server = ApiServer::new();
    let listening = server.listen().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    listening.write_kubeconfig(&kubeconfig).unwrap();
    let manifest = dir.path().join("objects.yaml");
    std::fs::write(&manifest, MANIFEST).unwrap();

    let (ok, stdout, stderr) =
        kubectl(&kubeconfig, &["create", "-f", manifest.to_str().unwrap()]).await;
    assert!(ok, "kubectl create failed: {stdout}{stderr}");
    assert!(
        stdout.contains("persistentvolumeclaim/kubectl-claim created"),
        "{stdout}"
    );
    assert!(
        stdout.contains("persistentvolume/kubectl-volume created"),
        "{stdout}"
    );

    let (ok, stdout, stderr) = kubectl(&kubeconfig, &["get", "pvc,pv", "-A"]).await;
    assert!(ok, "kubectl get failed: {stdout}{stderr}");
    assert!(stdout.contains("kubectl-claim"), "{stdout}");
    assert!(stdout.contains("kubectl-volume"), "{stdout}");
    assert!(stdout.contains("default"), "namespace column: {stdout}");

    let (ok, stdout, stderr) = kubectl(
        &kubeconfig,
        &[
            "get",
            "pvc",
            "kubectl-claim",
            "-o",
            "jsonpath={.spec.volumeMode}",
        ],
    )
    .await;
    assert!(ok, "{stderr}");
    assert_eq!(stdout, "Filesystem");
}
