//! Secret references from StorageClass parameters: which keys name a secret for which CSI call,
//! the `${...}` templates they may use, and validation of what they resolve to (spec §3).
//!
//! Only references are resolved here. The controller GETs the provisioner secret with
//! [`csi_common::secrets::fetch`] (its data goes into CreateVolume/DeleteVolume `secrets`); the
//! others only end up in the PersistentVolume for the attacher, the kubelet and the resizer to
//! use later. The templates are the provisioner's own: the other sidecars read finished
//! references from the PV.
//!
//! Templates follow Go's `os.Expand`: `${name}` and `$name` are replaced, unknown names are
//! collected and reported together (`invalid tokens: ["pvc.uid"]`). A namespace template may use
//! `${pv.name}` and `${pvc.namespace}`; a name template may also use `${pvc.name}` and
//! `${pvc.annotations['KEY']}`. The claim name and annotations are under the claim author's
//! control, which is why they cannot choose the namespace.

use std::collections::{BTreeMap, BTreeSet};

use csi_common::quote::go_quote;
use csi_common::secrets::SecretRef;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use thiserror::Error;

use crate::annotations::{ANN_DELETION_SECRET_NAME, ANN_DELETION_SECRET_NAMESPACE, pv_class_name};
use crate::params;

/// The CSI calls a StorageClass can configure a secret for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SecretKind {
    /// CreateVolume / DeleteVolume.
    Provisioner,
    /// ControllerPublishVolume / ControllerUnpublishVolume (attacher).
    ControllerPublish,
    /// NodeStageVolume (kubelet).
    NodeStage,
    /// NodePublishVolume (kubelet).
    NodePublish,
    /// ControllerExpandVolume (resizer).
    ControllerExpand,
    /// NodeExpandVolume (kubelet).
    NodeExpand,
    /// ControllerModifyVolume (resizer, via PV annotations: the PV has no field for it).
    ControllerModify,
}

/// The keys that configure one kind of secret.
struct SecretKeys {
    /// Name used in error messages.
    label: &'static str,
    name: &'static str,
    namespace: &'static str,
    deprecated_name: Option<&'static str>,
    deprecated_namespace: Option<&'static str>,
}

/// The fallback for kinds whose own keys are absent.
const DEFAULT_KEYS: SecretKeys = SecretKeys {
    label: "Default",
    name: params::PREFIXED_DEFAULT_SECRET_NAME_KEY,
    namespace: params::PREFIXED_DEFAULT_SECRET_NAMESPACE_KEY,
    deprecated_name: None,
    deprecated_namespace: None,
};

impl SecretKind {
    /// Every kind, in the order upstream resolves them.
    #[cfg(test)]
    pub(crate) const ALL: [SecretKind; 7] = [
        SecretKind::Provisioner,
        SecretKind::ControllerPublish,
        SecretKind::NodeStage,
        SecretKind::NodePublish,
        SecretKind::ControllerExpand,
        SecretKind::NodeExpand,
        SecretKind::ControllerModify,
    ];

    fn keys(self) -> SecretKeys {
        use params as p;
        match self {
            Self::Provisioner => SecretKeys {
                label: "Provisioner",
                name: p::PREFIXED_PROVISIONER_SECRET_NAME_KEY,
                namespace: p::PREFIXED_PROVISIONER_SECRET_NAMESPACE_KEY,
                deprecated_name: Some(p::DEPRECATED_PROVISIONER_SECRET_NAME_KEY),
                deprecated_namespace: Some(p::DEPRECATED_PROVISIONER_SECRET_NAMESPACE_KEY),
            },
            Self::ControllerPublish => SecretKeys {
                label: "ControllerPublish",
                name: p::PREFIXED_CONTROLLER_PUBLISH_SECRET_NAME_KEY,
                namespace: p::PREFIXED_CONTROLLER_PUBLISH_SECRET_NAMESPACE_KEY,
                deprecated_name: Some(p::DEPRECATED_CONTROLLER_PUBLISH_SECRET_NAME_KEY),
                deprecated_namespace: Some(p::DEPRECATED_CONTROLLER_PUBLISH_SECRET_NAMESPACE_KEY),
            },
            Self::NodeStage => SecretKeys {
                label: "NodeStage",
                name: p::PREFIXED_NODE_STAGE_SECRET_NAME_KEY,
                namespace: p::PREFIXED_NODE_STAGE_SECRET_NAMESPACE_KEY,
                deprecated_name: Some(p::DEPRECATED_NODE_STAGE_SECRET_NAME_KEY),
                deprecated_namespace: Some(p::DEPRECATED_NODE_STAGE_SECRET_NAMESPACE_KEY),
            },
            Self::NodePublish => SecretKeys {
                label: "NodePublish",
                name: p::PREFIXED_NODE_PUBLISH_SECRET_NAME_KEY,
                namespace: p::PREFIXED_NODE_PUBLISH_SECRET_NAMESPACE_KEY,
                deprecated_name: Some(p::DEPRECATED_NODE_PUBLISH_SECRET_NAME_KEY),
                deprecated_namespace: Some(p::DEPRECATED_NODE_PUBLISH_SECRET_NAMESPACE_KEY),
            },
            Self::ControllerExpand => SecretKeys {
                label: "ControllerExpand",
                name: p::PREFIXED_CONTROLLER_EXPAND_SECRET_NAME_KEY,
                namespace: p::PREFIXED_CONTROLLER_EXPAND_SECRET_NAMESPACE_KEY,
                deprecated_name: None,
                deprecated_namespace: None,
            },
            Self::NodeExpand => SecretKeys {
                label: "NodeExpand",
                name: p::PREFIXED_NODE_EXPAND_SECRET_NAME_KEY,
                namespace: p::PREFIXED_NODE_EXPAND_SECRET_NAMESPACE_KEY,
                deprecated_name: None,
                deprecated_namespace: None,
            },
            Self::ControllerModify => SecretKeys {
                label: "ControllerModify",
                name: p::PREFIXED_CONTROLLER_MODIFY_SECRET_NAME_KEY,
                namespace: p::PREFIXED_CONTROLLER_MODIFY_SECRET_NAMESPACE_KEY,
                deprecated_name: None,
                deprecated_namespace: None,
            },
        }
    }
}

/// The secret references that go into the PersistentVolume.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct PvSecretRefs {
    /// `spec.csi.controllerPublishSecretRef`.
    pub(crate) controller_publish: Option<SecretRef>,
    /// `spec.csi.nodeStageSecretRef`.
    pub(crate) node_stage: Option<SecretRef>,
    /// `spec.csi.nodePublishSecretRef`.
    pub(crate) node_publish: Option<SecretRef>,
    /// `spec.csi.controllerExpandSecretRef`.
    pub(crate) controller_expand: Option<SecretRef>,
    /// `spec.csi.nodeExpandSecretRef`.
    pub(crate) node_expand: Option<SecretRef>,
    /// `volume.kubernetes.io/controller-modify-secret-name`/`-namespace` annotations.
    pub(crate) controller_modify: Option<SecretRef>,
}

/// What a template may refer to from the claim.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClaimTokens<'a> {
    /// `${pvc.name}`.
    pub(crate) name: &'a str,
    /// `${pvc.namespace}`.
    pub(crate) namespace: &'a str,
    /// `${pvc.annotations['KEY']}`; `None` when only the claim's name and namespace are known
    /// (deletion of an old PV via its claimRef).
    pub(crate) annotations: Option<&'a BTreeMap<String, String>>,
}

impl<'a> ClaimTokens<'a> {
    /// The tokens of a claim object.
    pub(crate) fn from_pvc(pvc: &'a PersistentVolumeClaim) -> Self {
        Self {
            name: pvc.metadata.name.as_deref().unwrap_or_default(),
            namespace: pvc.metadata.namespace.as_deref().unwrap_or_default(),
            annotations: pvc.metadata.annotations.as_ref(),
        }
    }
}

/// How the name/namespace keys of one kind are set wrong.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub(crate) enum SecretKeysError {
    /// Deprecated and prefixed spellings of the same key.
    #[error(
        r#"{kind} secrets specified in parameters with both "csi" and "csi.storage.k8s.io/" keys"#
    )]
    BothSpellings {
        /// Secret kind as upstream names it.
        kind: &'static str,
    },
    /// A name without a namespace or the other way round.
    #[error("either name and namespace for {kind} secrets specified, Both must be specified")]
    NameWithoutNamespace {
        /// Secret kind as upstream names it.
        kind: &'static str,
    },
    /// Both keys present, one of them empty.
    #[error(
        "{kind} secrets specified in parameters but value of either namespace or name is empty"
    )]
    EmptyValue {
        /// Secret kind as upstream names it.
        kind: &'static str,
    },
}

/// Template tokens nothing provides.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid tokens: [{}]", .tokens.iter().map(|t| go_quote(t)).collect::<Vec<_>>().join(" "))]
pub(crate) struct InvalidTokens {
    /// The unknown token names, sorted and without duplicates.
    pub(crate) tokens: Vec<String>,
}

/// Why a secret reference could not be resolved (upstream `getSecretReference`).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub(crate) enum SecretError {
    /// The kind's own keys are inconsistent.
    #[error("failed to get name and namespace template from params")]
    Keys(#[source] SecretKeysError),
    /// The default `secret-name`/`secret-namespace` keys are inconsistent.
    #[error("failed to get default name and namespace template from params")]
    DefaultKeys(#[source] SecretKeysError),
    /// A template uses tokens that are not available.
    #[error("error resolving value {}", go_quote(.template))]
    Template {
        /// The template as written.
        template: String,
        /// The unknown tokens.
        #[source]
        source: InvalidTokens,
    },
    /// The namespace is not a DNS-1123 label.
    #[error("{}", invalid_message(.template, .resolved, "namespace"))]
    InvalidNamespace {
        /// The template as written.
        template: String,
        /// What it resolved to.
        resolved: String,
    },
    /// The name is not a DNS-1123 subdomain.
    #[error("{}", invalid_message(.template, .resolved, "secret"))]
    InvalidName {
        /// The template as written.
        template: String,
        /// What it resolved to.
        resolved: String,
    },
}

fn invalid_message(template: &str, resolved: &str, what: &str) -> String {
    if template == resolved {
        format!("{} is not a valid {what} name", go_quote(template))
    } else {
        format!(
            "{} resolved to {} which is not a valid {what} name",
            go_quote(template),
            go_quote(resolved)
        )
    }
}

/// Resolves one kind's secret reference; `None` when neither its own keys nor the default keys
/// are set.
pub(crate) fn secret_ref(
    kind: SecretKind,
    params: &BTreeMap<String, String>,
    pv_name: &str,
    claim: &ClaimTokens<'_>,
) -> Result<Option<SecretRef>, SecretError> {
    let mut templates = templates(&kind.keys(), params).map_err(SecretError::Keys)?;
    if templates.is_none() {
        templates = templates_of_default(params)?;
    }
    let Some((name_template, namespace_template)) = templates else {
        return Ok(None);
    };

    let mut namespace_tokens = BTreeMap::from([("pv.name".to_owned(), pv_name.to_owned())]);
    namespace_tokens.insert("pvc.namespace".to_owned(), claim.namespace.to_owned());
    let namespace =
        expand(namespace_template, &namespace_tokens).map_err(|source| SecretError::Template {
            template: namespace_template.to_owned(),
            source,
        })?;
    if !is_dns1123_label(&namespace) {
        return Err(SecretError::InvalidNamespace {
            template: namespace_template.to_owned(),
            resolved: namespace,
        });
    }

    let mut name_tokens = namespace_tokens;
    name_tokens.insert("pvc.name".to_owned(), claim.name.to_owned());
    for (key, value) in claim.annotations.into_iter().flatten() {
        name_tokens.insert(format!("pvc.annotations['{key}']"), value.clone());
    }
    let name = expand(name_template, &name_tokens).map_err(|source| SecretError::Template {
        template: name_template.to_owned(),
        source,
    })?;
    if !is_dns1123_subdomain(&name) {
        return Err(SecretError::InvalidName {
            template: name_template.to_owned(),
            resolved: name,
        });
    }
    Ok(Some(SecretRef { name, namespace }))
}

fn templates_of_default(
    params: &BTreeMap<String, String>,
) -> Result<Option<(&str, &str)>, SecretError> {
    templates(&DEFAULT_KEYS, params).map_err(SecretError::DefaultKeys)
}

/// The (name, namespace) templates of one kind, `None` if its keys are absent (upstream
/// `verifyAndGetSecretNameAndNamespaceTemplate`).
fn templates<'p>(
    keys: &SecretKeys,
    params: &'p BTreeMap<String, String>,
) -> Result<Option<(&'p str, &'p str)>, SecretKeysError> {
    let lookup = |key: Option<&str>| key.and_then(|k| params.get(k)).map(String::as_str);
    let names: Vec<&str> = [lookup(keys.deprecated_name), lookup(Some(keys.name))]
        .into_iter()
        .flatten()
        .collect();
    let namespaces: Vec<&str> = [
        lookup(keys.deprecated_namespace),
        lookup(Some(keys.namespace)),
    ]
    .into_iter()
    .flatten()
    .collect();
    let kind = keys.label;
    match (names.as_slice(), namespaces.as_slice()) {
        ([], []) => Ok(None),
        ([_, _], _) | (_, [_, _]) => Err(SecretKeysError::BothSpellings { kind }),
        ([name], [namespace]) => {
            if name.is_empty() || namespace.is_empty() {
                Err(SecretKeysError::EmptyValue { kind })
            } else {
                Ok(Some((name, namespace)))
            }
        }
        _ => Err(SecretKeysError::NameWithoutNamespace { kind }),
    }
}

/// Resolves the five PV secret references and the controller-modify one, in upstream's order.
pub(crate) fn pv_secret_refs(
    params: &BTreeMap<String, String>,
    pv_name: &str,
    claim: &ClaimTokens<'_>,
) -> Result<PvSecretRefs, SecretError> {
    let resolve = |kind| secret_ref(kind, params, pv_name, claim);
    Ok(PvSecretRefs {
        controller_publish: resolve(SecretKind::ControllerPublish)?,
        node_stage: resolve(SecretKind::NodeStage)?,
        node_publish: resolve(SecretKind::NodePublish)?,
        controller_expand: resolve(SecretKind::ControllerExpand)?,
        node_expand: resolve(SecretKind::NodeExpand)?,
        controller_modify: resolve(SecretKind::ControllerModify)?,
    })
}

/// A deletion-time secret reference could not be resolved from the StorageClass.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("failed to get secretreference for volume {volume}")]
pub(crate) struct DeletionSecretError {
    /// PV name.
    pub(crate) volume: String,
    /// What was wrong with the class's reference.
    #[source]
    pub(crate) source: SecretError,
}

/// The provisioner secret to send with DeleteVolume (spec §5 step 4e).
///
/// A PV written by this provisioner (or upstream since v1.6) carries both
/// `volume.kubernetes.io/provisioner-deletion-secret-*` annotations: both set means that secret,
/// both empty (or any other mix) means none. Only PVs without the pair fall back to the
/// StorageClass (`class`, looked up by [`pv_class_name`]; pass `None` when it does not exist,
/// which means deleting without secrets) and the claim named in `spec.claimRef`; such a claim
/// is known by name and namespace only, so a `${pvc.annotations[...]}` template fails and the
/// deletion is retried.
///
/// Fetching the secret is the controller's job; upstream deletes without secrets when that GET
/// fails (the secret may be gone already).
pub(crate) fn deletion_secret(
    pv: &PersistentVolume,
    class: Option<&StorageClass>,
) -> Result<Option<SecretRef>, DeletionSecretError> {
    let annotations = pv.metadata.annotations.as_ref();
    let name = annotations.and_then(|a| a.get(ANN_DELETION_SECRET_NAME));
    let namespace = annotations.and_then(|a| a.get(ANN_DELETION_SECRET_NAMESPACE));
    if let (Some(name), Some(namespace)) = (name, namespace) {
        if name.is_empty() || namespace.is_empty() {
            return Ok(None);
        }
        return Ok(Some(SecretRef {
            name: name.clone(),
            namespace: namespace.clone(),
        }));
    }
    if pv_class_name(pv).is_empty() {
        return Ok(None);
    }
    let (Some(class), Some(claim_ref)) =
        (class, pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()))
    else {
        return Ok(None);
    };
    let volume = pv.metadata.name.clone().unwrap_or_default();
    let empty = BTreeMap::new();
    let claim = ClaimTokens {
        name: claim_ref.name.as_deref().unwrap_or_default(),
        namespace: claim_ref.namespace.as_deref().unwrap_or_default(),
        annotations: None,
    };
    secret_ref(
        SecretKind::Provisioner,
        class.parameters.as_ref().unwrap_or(&empty),
        &volume,
        &claim,
    )
    .map_err(|source| DeletionSecretError { volume, source })
}

/// Expands `${name}` / `$name` like Go's `os.Expand`, failing on names `tokens` lacks.
fn expand(template: &str, tokens: &BTreeMap<String, String>) -> Result<String, InvalidTokens> {
    let bytes = template.as_bytes();
    let mut out = String::with_capacity(template.len());
    let mut missing = BTreeSet::new();
    let mut copied_up_to = 0;
    let mut j = 0;
    while j < bytes.len() {
        if bytes[j] == b'$' && j + 1 < bytes.len() {
            out.push_str(&template[copied_up_to..j]);
            let (name, width) = shell_name(&template[j + 1..]);
            match (name, width) {
                // Bad syntax such as "${}" or an unclosed "${": Go drops those characters.
                ("", w) if w > 0 => {}
                // "$" followed by nothing name-like stays a literal dollar.
                ("", _) => out.push('$'),
                (name, _) => match tokens.get(name) {
                    Some(value) => out.push_str(value),
                    None => {
                        missing.insert(name.to_owned());
                    }
                },
            }
            j += width;
            copied_up_to = j + 1;
        }
        j += 1;
    }
    out.push_str(&template[copied_up_to.min(template.len())..]);
    if missing.is_empty() {
        Ok(out)
    } else {
        Err(InvalidTokens {
            tokens: missing.into_iter().collect(),
        })
    }
}

/// The variable name after a `$` and how many bytes it spans (Go's `getShellName`).
fn shell_name(s: &str) -> (&str, usize) {
    let bytes = s.as_bytes();
    let special = |c: u8| b"*#$@!?-0123456789".contains(&c);
    if bytes[0] == b'{' {
        if bytes.len() > 2 && special(bytes[1]) && bytes[2] == b'}' {
            return (&s[1..2], 3);
        }
        return match s[1..].find('}') {
            Some(0) => ("", 2),
            Some(close) => (&s[1..=close], close + 2),
            None => ("", 1),
        };
    }
    if special(bytes[0]) {
        return (&s[..1], 1);
    }
    let len = bytes
        .iter()
        .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_')
        .count();
    (&s[..len], len)
}

/// RFC 1123 label, as a namespace must be: at most 63 lowercase alphanumerics or '-', starting
/// and ending alphanumeric.
fn is_dns1123_label(s: &str) -> bool {
    s.len() <= 63 && is_label_shaped(s)
}

/// RFC 1123 subdomain, as an object name must be: at most 253 characters of dot-separated
/// label-shaped parts.
fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_label_shaped)
}

fn is_label_shaped(s: &str) -> bool {
    let bytes = s.as_bytes();
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            alnum(first) && alnum(last) && bytes.iter().all(|c| alnum(c) || *c == b'-')
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests;
