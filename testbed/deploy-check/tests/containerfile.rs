//! deploy/image/Containerfile, read as an image builder reads it: one final stage per sidecar,
//! each `scratch` plus the one static binary at upstream's path, a numeric non-root user, the
//! OCI labels, and the binaries built by build-static.sh (the script the static tests check).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failed setup step should panic"
)]

use std::collections::BTreeMap;

use testbed_deploy_check::workload::BINARIES;
use testbed_deploy_check::workspace_root;

/// The instructions of each stage, by stage name (continuation lines joined).
fn stages() -> (BTreeMap<String, Vec<String>>, BTreeMap<String, String>) {
    let text =
        std::fs::read_to_string(workspace_root().join("deploy/image/Containerfile")).unwrap();
    let joined = text.replace("\\\n", " ");
    let mut stages: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut parents = BTreeMap::new();
    let mut current = String::new();
    for line in joined.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(from) = line.strip_prefix("FROM ") {
            let words: Vec<&str> = from.split_whitespace().collect();
            current = words.get(2).map_or_else(String::new, |s| (*s).to_owned());
            parents.insert(current.clone(), words[0].to_owned());
        }
        stages
            .entry(current.clone())
            .or_default()
            .push(line.to_owned());
    }
    (stages, parents)
}

#[test]
fn every_sidecar_has_a_scratch_stage_with_only_its_binary_at_upstreams_path() {
    let (stages, parents) = stages();
    assert_eq!(parents["base"], "scratch");
    let base = &stages["base"];
    assert!(base.iter().any(|l| l == "USER 65532:65532"), "{base:?}");
    for label in ["source", "version", "licenses"] {
        assert!(
            base.iter()
                .any(|l| l.contains(&format!("org.opencontainers.image.{label}="))),
            "label {label}"
        );
    }
    for binary in BINARIES {
        let stage = stages
            .get(binary)
            .unwrap_or_else(|| panic!("no stage {binary}"));
        assert_eq!(parents[binary], "base", "{binary}");
        let copies: Vec<_> = stage.iter().filter(|l| l.starts_with("COPY")).collect();
        assert_eq!(
            copies,
            [&format!("COPY --from=build /out/{binary} /{binary}")],
            "{binary}"
        );
        assert!(
            stage.contains(&format!("ENTRYPOINT [\"/{binary}\"]")),
            "{binary}: {stage:?}"
        );
        assert!(
            !stage.iter().any(|l| l.starts_with("USER")),
            "{binary}: user from base"
        );
    }
    let build = &stages["build"];
    assert!(
        build.contains(&"RUN deploy/image/build-static.sh /out release".to_owned()),
        "{build:?}"
    );
}

#[test]
fn the_build_script_builds_and_checks_every_binary_static() {
    let script =
        std::fs::read_to_string(workspace_root().join("deploy/image/build-static.sh")).unwrap();
    assert!(script.contains("-C target-feature=+crt-static"));
    assert!(script.contains("--target \"$target\""));
    assert!(
        script.contains("INTERP"),
        "the script refuses a dynamic binary"
    );
    for binary in BINARIES {
        assert!(script.contains(binary), "{binary}");
    }
}
