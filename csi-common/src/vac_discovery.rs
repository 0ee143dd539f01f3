//! VolumeAttributesClass auto-detection, shared by csi-resizer and csi-provisioner (spec
//! sidecars.md §2.2 step 3, external-resizer `main.go`; provisioner.md §1a
//! `--feature-gates`): when the `VolumeAttributesClass` gate was not set on the command line, ask
//! discovery whether `storage.k8s.io/v1` serves kind `VolumeAttributesClass`; if it does not
//! (404, or the kind missing from the list) the gate is off; if discovery itself fails the
//! default (on) stays.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList;
use kube::Client;

/// The group version that serves the class.
const GROUP_VERSION: &str = "storage.k8s.io/v1";
/// Its kind.
const KIND: &str = "VolumeAttributesClass";

/// What discovery said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Served {
    /// The kind is in the list.
    Yes,
    /// The group version or the kind is missing.
    No,
    /// Discovery failed (the text of the error).
    Unknown(String),
}

/// Reads a discovery answer (pure, for tests).
pub fn served(answer: Result<&APIResourceList, &kube::Error>) -> Served {
    match answer {
        Ok(list) => {
            if list
                .resources
                .iter()
                .any(|r| r.kind == KIND && !r.name.contains('/'))
            {
                Served::Yes
            } else {
                Served::No
            }
        }
        Err(kube::Error::Api(status)) if status.code == 404 => Served::No,
        Err(err) => Served::Unknown(crate::logging::error_chain(err)),
    }
}

/// The gate: as given, else what discovery said (`None`: not asked), on unless not served.
pub fn gate(given: Option<bool>, served: Option<&Served>) -> bool {
    given.unwrap_or(!matches!(served, Some(Served::No)))
}

/// The gate for this API server; discovery is asked only when the gate was not given.
pub async fn volume_attributes_class(client: &Client, given: Option<bool>) -> bool {
    if given.is_some() {
        return gate(given, None);
    }
    let answer = client.list_api_group_resources(GROUP_VERSION).await;
    let served = served(answer.as_ref());
    match &served {
        Served::Yes => tracing::debug!("{GROUP_VERSION} serves {KIND}"),
        Served::No => tracing::info!(
            "{GROUP_VERSION} does not serve {KIND}: feature gate VolumeAttributesClass turned off"
        ),
        Served::Unknown(err) => tracing::warn!(
            error = err,
            "cannot tell whether {GROUP_VERSION} serves {KIND}: keeping feature gate VolumeAttributesClass on"
        ),
    }
    gate(given, Some(&served))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResource;

    use super::*;

    fn list(resources: &[(&str, &str)]) -> APIResourceList {
        APIResourceList {
            group_version: GROUP_VERSION.into(),
            resources: resources
                .iter()
                .map(|(name, kind)| APIResource {
                    name: (*name).into(),
                    kind: (*kind).into(),
                    ..Default::default()
                })
                .collect(),
        }
    }

    fn api_error(code: u16) -> kube::Error {
        kube::Error::Api(Box::new(kube::core::Status {
            code,
            ..Default::default()
        }))
    }

    #[test]
    fn discovery_answers_map_to_served() {
        let with = list(&[
            ("storageclasses", "StorageClass"),
            ("volumeattributesclasses", KIND),
        ]);
        assert_eq!(served(Ok(&with)), Served::Yes);
        let without = list(&[("storageclasses", "StorageClass")]);
        assert_eq!(served(Ok(&without)), Served::No);
        let subresource_only = list(&[("volumeattributesclasses/status", KIND)]);
        assert_eq!(served(Ok(&subresource_only)), Served::No);
        assert_eq!(served(Err(&api_error(404))), Served::No);
        assert!(matches!(served(Err(&api_error(503))), Served::Unknown(_)));
    }

    #[test]
    fn an_explicit_gate_wins_and_only_a_missing_kind_turns_it_off() {
        let unknown = Served::Unknown("x".into());
        let cases = [
            (Some(false), None, false),
            (Some(true), None, true),
            (Some(true), Some(&Served::No), true),
            (None, Some(&Served::Yes), true),
            (None, Some(&Served::No), false),
            (None, Some(&unknown), true),
            (None, None, true),
        ];
        for (given, served, want) in cases {
            assert_eq!(gate(given, served), want, "{given:?} {served:?}");
        }
    }
}
