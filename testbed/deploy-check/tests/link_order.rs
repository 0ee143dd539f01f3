//! The link order of the controller sidecars (deploy/link-order): the two awk steps that turn a
//! callgrind profile into a linker script, the scripts the three packages carry, and the
//! toolchain's linker placing a function the script names in `.text.hot` when the name in the
//! script carries another build's crate disambiguator, as a shipped build's names do.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failed setup step should panic"
)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `awk [args] -f deploy/link-order/<program>` over `input`: its stdout.
fn awk(args: &[&str], program: &str, input: &str) -> String {
    let mut child = Command::new("awk")
        .args(args)
        .arg("-f")
        .arg(workspace().join("deploy/link-order").join(program))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("awk runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "awk -f {program} failed");
    String::from_utf8(out.stdout).unwrap()
}

/// The function lines of a script (between `.text.hot : {` and its `}`), each as the name
/// pattern it places, after checking that it places both spellings of the function's section:
/// `.text.NAME` and, for a function LLVM deems cold, `.text.unlikely.NAME`.
fn patterns(script: &str) -> Vec<&str> {
    script
        .lines()
        .filter_map(|l| l.trim().strip_prefix("*(.text."))
        .filter_map(|l| l.strip_suffix(')'))
        .map(|l| {
            let (name, unlikely) = l.split_once(' ').expect("two section names");
            assert_eq!(unlikely.strip_prefix(".text.unlikely."), Some(name), "{l}");
            name
        })
        .collect()
}

#[test]
fn hottest_counts_a_functions_own_cost_not_its_calls() {
    // The callgrind format: `fn=` starts a function's costs, `calls=` is followed by the
    // call's inclusive cost (not the caller's own), `cfn=` names a callee, positions may be
    // relative (`+N`, `-N`) or repeated (`*`).
    let profile = "\
events: Ir
fn=_RNvCsA_1a4warm
10 5
+1 5
cfn=_RNvCsA_1a3hot
calls=1 20
* 1000
fn=_RNvCsA_1a3hot
20 300
cfn=_RNvCsA_1a4idle
calls=1 30
-2 0
fn=_RNvCsA_1a4warm
* 2
";
    let mut ranked: Vec<(u64, String)> = awk(&[], "hottest.awk", profile)
        .lines()
        .map(|l| {
            let (cost, name) = l.split_once(' ').unwrap();
            (cost.parse().unwrap(), name.to_owned())
        })
        .collect();
    ranked.sort();
    assert_eq!(
        ranked,
        [
            (0, "_RNvCsA_1a4idle".to_owned()),
            (12, "_RNvCsA_1a4warm".to_owned()),
            (300, "_RNvCsA_1a3hot".to_owned()),
        ]
    );
}

#[test]
fn script_names_v0_functions_with_wildcards_for_what_changes_between_builds() {
    let names = "\
_RNvCs1zR30Su4Eks_6memchr6detect
_int_free
_ZN4core3fmt5write17h0123456789abcdefE
_RNvXs3_NtNtCs1zR30Su4Eks_4core4hash3sipINtB5_6HasherNtB5_11Sip13RoundsENtB7_6Hasher5writeCsaJUBzDh3Q0B_11provisioner
_RNvNtCs9ApM1ROSAcd_4core3fmt5write'2
_RNvXsZ_NtCs9ApM1ROSAcd_5alloc6stringNtB5_6StringNtNtCs1zR30Su4Eks_4core3fmt5Write9write_str.38
_RINvNtCs1_4core3ptr13drop_in_placeNtNtCs2_10serde_json5value5ValueEBK_.llvm.12345
_RNvCsaJUBzDh3Q0B_6memchr6detect
";
    let script = awk(&[], "script.awk", names);
    assert_eq!(
        patterns(&script),
        [
            // The disambiguator: another build of the same crate folds into it (last line).
            "_RNvCs*_6memchr6detect*",
            // A C name no archive member list holds: its own section (compiler-builtins).
            "_int_free",
            // Back-references and the instantiating crate (a crate root that ends the name).
            "_RNvXs3_NtNtCs*_4core4hash3sipINtB*_6HasherNtB*_11Sip13RoundsENtB*_6Hasher5write*",
            // callgrind's recursion mark; `4core3fmt5write` is the path, not a crate suffix.
            "_RNvNtCs*_4core3fmt5write*",
            // A clone's number.
            "_RNvXsZ_NtCs*_5alloc6stringNtB*_6StringNtNtCs*_4core3fmt5Write9write_str*",
            // LTO's suffix, and an instantiating crate given as a back-reference.
            "_RINvNtCs*_4core3ptr13drop_in_placeNtNtCs*_10serde_json5value5ValueE*",
        ],
        "legacy names dropped"
    );
    assert!(script.trim_end().ends_with("INSERT BEFORE .text;"));
}

#[test]
fn script_places_the_c_librarys_objects_that_ran_whole_and_other_c_functions_by_section() {
    let dir = tempfile::tempdir().unwrap();
    let members = dir.path().join("libc-members");
    // `SYMBOL ARCHIVE:OBJECT` as generate.sh writes them from libc.a and libm's archive.
    std::fs::write(
        &members,
        "_int_free libc.a:malloc.o\nmalloc libc.a:malloc.o\n\
         __memcpy_avx_unaligned_erms libc.a:memmove-avx-unaligned-erms.o\n\
         __ieee754_pow_fma libm-2.36.a:e_pow-fma.o\n",
    )
    .unwrap();
    let script = awk(
        &["-v", &format!("members={}", members.display())],
        "script.awk",
        "_int_free\n_RNvCsX_1a1b\nmalloc'2\n0x00000000004edd20\n(below main)\n\
         __memcpy_avx_unaligned_erms\n__ieee754_pow_fma\n__floattidf\n",
    );
    let entries: Vec<&str> = script
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with('*'))
        .collect();
    assert_eq!(
        entries,
        [
            "*libc.a:malloc.o(.text .text.*)",
            "*(.text._RNvCs*_1a1b* .text.unlikely._RNvCs*_1a1b*)",
            "*libc.a:memmove-avx-unaligned-erms.o(.text .text.*)",
            "*libm-2.36.a:e_pow-fma.o(.text .text.*)",
            "*(.text.__floattidf .text.unlikely.__floattidf)",
        ],
        "an object once, where its first function ranks; a C name no archive holds by its \
         section; callgrind's names for code without a symbol dropped"
    );
}

#[test]
fn each_controller_sidecar_links_with_a_script_of_its_own() {
    for (package, own_crate) in [
        ("provisioner", "11provisioner"),
        ("attacher", "8attacher"),
        ("resizer", "7resizer"),
    ] {
        let dir = workspace().join(package);
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        assert!(
            manifest.contains("build = \"../deploy/link-order/build.rs\""),
            "{package}/Cargo.toml does not use deploy/link-order/build.rs"
        );
        let script = std::fs::read_to_string(dir.join("link-order.ld")).unwrap();
        let functions = patterns(&script);
        assert!(
            functions.len() > 1000,
            "{package}/link-order.ld names {} functions",
            functions.len()
        );
        assert!(
            functions.iter().any(|f| f.contains(own_crate)),
            "{package}/link-order.ld names none of the package's own functions"
        );
        for f in &functions {
            let literal_disambiguator = f
                .match_indices("Cs")
                .any(|(at, _)| is_disambiguator(&f[at + 2..]));
            assert!(
                !literal_disambiguator,
                "{package}: {f} keeps a crate disambiguator"
            );
        }
    }
}

/// Whether `rest` (what follows a `Cs`) reads as a crate disambiguator: base-62 digits, `_`
/// (the wildcard `*_` does not).
fn is_disambiguator(rest: &str) -> bool {
    let digits = rest.bytes().take_while(u8::is_ascii_alphanumeric).count();
    digits > 0 && rest.as_bytes().get(digits) == Some(&b'_')
}

#[test]
fn the_linker_puts_the_named_function_in_text_hot() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("linkprobe.rs");
    std::fs::write(
        &source,
        "#[inline(never)] pub fn cold_one(x: u64) -> u64 { x.wrapping_mul(3) ^ 7 }\n\
         #[inline(never)] pub fn hot_one(x: u64) -> u64 { x.wrapping_mul(5) ^ 11 }\n\
         #[cold] #[inline(never)] pub fn rare_one(x: u64) -> u64 { x.wrapping_mul(7) ^ 13 }\n\
         fn main() {\n\
             let x = std::hint::black_box(2);\n\
             println!(\"{}\", cold_one(x) + hot_one(x) + rare_one(x));\n\
         }\n",
    )
    .unwrap();
    // The name as another build spells it: another crate disambiguator.
    let script = awk(
        &[],
        "script.awk",
        "_RNvCsXyZ123abc_9linkprobe7hot_one\n_RNvCsXyZ123abc_9linkprobe8rare_one\n",
    );
    let script_path = dir.path().join("link-order.ld");
    std::fs::write(&script_path, script).unwrap();
    let map = dir.path().join("link.map");
    let status = Command::new(std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned()))
        .current_dir(workspace())
        .args(["--edition", "2021", "-C", "opt-level=1"])
        .args(["-C", "symbol-mangling-version=v0"])
        .arg("-C")
        .arg(format!("link-arg=-Wl,-T,{}", script_path.display()))
        .arg("-C")
        .arg(format!("link-arg=-Wl,-Map={}", map.display()))
        .arg("-o")
        .arg(dir.path().join("linkprobe"))
        .arg(&source)
        .status()
        .expect("rustc runs");
    assert!(status.success(), "rustc with the link order script failed");
    let map = std::fs::read_to_string(map).unwrap();
    let line_of = |pred: &dyn Fn(&str) -> bool| map.lines().position(pred);
    let hot_section = line_of(&|l| l.trim_end().ends_with(" .text.hot")).expect(".text.hot");
    let text_section = line_of(&|l| l.trim_end().ends_with(" .text")).expect(".text");
    let hot_fn = line_of(&|l| l.contains("9linkprobe7hot_one)")).expect("hot_one's section");
    let cold_fn = line_of(&|l| l.contains("9linkprobe8cold_one)")).expect("cold_one's section");
    assert!(
        hot_section < hot_fn && hot_fn < text_section,
        "hot_one is in .text.hot"
    );
    assert!(cold_fn > text_section, "cold_one stays in .text");
    // A #[cold] function's section is `.text.unlikely.` and its name (LLVM's section prefix).
    let rare_fn =
        line_of(&|l| l.contains(".text.unlikely._RNvCs") && l.contains("9linkprobe8rare_one)"))
            .expect("rare_one's section, named .text.unlikely.");
    assert!(
        hot_section < rare_fn && rare_fn < text_section,
        "rare_one is in .text.hot"
    );
}
