//! The committed crds/*.yaml must be exactly what the Rust types generate (`make crds` rewrites them).

use std::path::Path;

#[test]
fn committed_crds_match_the_types() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("crds");
    let files = ksched::api::crd_files().expect("serialize CRDs");
    let mut expected_names: Vec<String> = files.iter().map(|(n, _)| n.clone()).collect();
    for (name, yaml) in files {
        let committed = std::fs::read_to_string(dir.join(&name))
            .unwrap_or_else(|e| panic!("crds/{name} missing ({e}): run `make crds`"));
        assert!(
            committed == yaml,
            "crds/{name} differs from the types: run `make crds` and commit the result"
        );
    }
    let mut present: Vec<String> = std::fs::read_dir(&dir)
        .expect("read crds/")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    present.sort();
    expected_names.sort();
    assert_eq!(
        present, expected_names,
        "crds/ holds files the types do not generate: run `make crds`"
    );
}
