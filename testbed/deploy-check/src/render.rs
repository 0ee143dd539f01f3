//! `kubectl kustomize <dir>`: the objects an operator's `kubectl apply -k` would send. kubectl
//! is required; without it the checks fail (they never pass by skipping).

use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// Why a directory could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// kubectl is not installed or not on PATH.
    #[error(
        "cannot run kubectl (install it: the deploy/ checks render every overlay with `kubectl kustomize`)"
    )]
    Kubectl(#[source] std::io::Error),
    /// kustomize refused the directory.
    #[error("kubectl kustomize {dir} failed: {stderr}")]
    Kustomize {
        /// The directory.
        dir: String,
        /// What kubectl printed.
        stderr: String,
    },
    /// The output is not YAML.
    #[error("kubectl kustomize {dir} printed something that is not YAML")]
    Yaml {
        /// The directory.
        dir: String,
        /// Cause.
        #[source]
        source: Box<serde_saphyr::Error>,
    },
}

/// Renders `dir` (a kustomization) into its objects, in kustomize's order.
///
/// # Errors
/// See [`Error`].
pub fn kustomize(dir: &Path) -> Result<Vec<Value>, Error> {
    let output = Command::new("kubectl")
        .arg("kustomize")
        .arg(dir)
        .output()
        .map_err(Error::Kubectl)?;
    let dir = dir.display().to_string();
    if !output.status.success() {
        return Err(Error::Kustomize {
            dir,
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        });
    }
    let text = String::from_utf8_lossy(&output.stdout);
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).map_err(|source| Error::Yaml {
        dir,
        source: Box::new(source),
    })?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

/// `kind/name` of an object, for messages.
pub fn describe(object: &Value) -> String {
    format!(
        "{}/{}",
        object["kind"].as_str().unwrap_or("?"),
        object["metadata"]["name"].as_str().unwrap_or("?")
    )
}

/// The objects of `kind`.
pub fn of_kind<'a>(objects: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objects.iter().filter(|o| o["kind"] == kind).collect()
}
