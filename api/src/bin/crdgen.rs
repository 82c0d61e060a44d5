//! Writes the suite's CustomResourceDefinitions, one YAML file per CRD, into each folder given
//! on the command line (by default `deploy/crds` and `helm/visitors-operator/crds`).
//! `crdgen --check` compares instead of writing, and fails when a committed file is stale.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

const DEFAULT_DIRS: [&str; 2] = ["deploy/crds", "helm/visitors-operator/crds"];

fn main() -> ExitCode {
    let mut check = false;
    let mut dirs = Vec::new();
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--check" => check = true,
            "-h" | "--help" => {
                println!(
                    "usage: crdgen [--check] [DIR ...]\n\nWrites (or with --check, compares) one YAML file per CRD into each DIR.\nDefault DIRs: {}",
                    DEFAULT_DIRS.join(" ")
                );
                return ExitCode::SUCCESS;
            }
            dir => dirs.push(PathBuf::from(dir)),
        }
    }
    if dirs.is_empty() {
        dirs = DEFAULT_DIRS.iter().map(PathBuf::from).collect();
    }
    let mut stale = Vec::new();
    for dir in &dirs {
        for (file, yaml) in visitors_api::crds::files() {
            let path = dir.join(file);
            if check {
                if std::fs::read_to_string(&path).ok().as_deref() != Some(yaml.as_str()) {
                    stale.push(path);
                }
            } else if let Err(e) = write(&path, &yaml) {
                eprintln!("crdgen: cannot write {}: {e}", path.display());
                return ExitCode::FAILURE;
            }
        }
    }
    if stale.is_empty() {
        return ExitCode::SUCCESS;
    }
    for path in stale {
        eprintln!("crdgen: {} differs from the generated CRD; run `cargo run --bin crdgen`", path.display());
    }
    ExitCode::FAILURE
}

fn write(path: &Path, yaml: &str) -> std::io::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(path, yaml)
}
