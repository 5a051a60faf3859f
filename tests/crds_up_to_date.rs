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

/// `kubectl explain` shows each field's description: every field of every CRD in crds/ has one,
/// and a field with a schema default says what it is.
#[test]
fn every_field_is_described_with_its_default() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("crds");
    let mut problems = Vec::new();
    let mut fields = 0;
    for (name, _) in ksched::api::crd_files().expect("serialize CRDs") {
        let text = std::fs::read_to_string(dir.join(&name)).expect("read crds/");
        let crd: serde_json::Value = serde_saphyr::from_str(&text).expect("crds/ holds YAML");
        for version in crd["spec"]["versions"].as_array().expect("versions") {
            let root = &version["schema"]["openAPIV3Schema"];
            let at = format!("{name} {}", version["name"].as_str().unwrap_or("?"));
            for (field, schema) in root["properties"].as_object().expect("properties") {
                if field != "apiVersion" && field != "kind" && field != "metadata" {
                    walk(&at, field, schema, &mut problems, &mut fields);
                }
            }
        }
    }
    assert!(
        fields > 250,
        "only {fields} fields found: is the walk right?"
    );
    assert!(
        problems.is_empty(),
        "{} of {fields} fields in crds/ are not described well enough for `kubectl explain` (document them in src/api/, then `make crds`):\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// Checks the field at `path` and every field below it (object properties, list items' and map
/// values' properties).
fn walk(
    at: &str,
    path: &str,
    schema: &serde_json::Value,
    problems: &mut Vec<String>,
    fields: &mut usize,
) {
    *fields += 1;
    let description = schema["description"].as_str().unwrap_or("").trim();
    if description.is_empty() {
        problems.push(format!("{at}: {path}: no description"));
    } else if schema.get("default").is_some() && !description.to_lowercase().contains("default") {
        problems.push(format!(
            "{at}: {path}: has default {} but its description does not say so",
            schema["default"]
        ));
    }
    walk_children(at, path, schema, problems, fields);
}

fn walk_children(
    at: &str,
    path: &str,
    schema: &serde_json::Value,
    problems: &mut Vec<String>,
    fields: &mut usize,
) {
    if let Some(props) = schema["properties"].as_object() {
        for (field, child) in props {
            walk(at, &format!("{path}.{field}"), child, problems, fields);
        }
    }
    // An item or a map value is not a field of its own (explain shows the list's or map's
    // description), but its properties are.
    if schema["items"].is_object() {
        walk_children(at, &format!("{path}[]"), &schema["items"], problems, fields);
    }
    if schema["additionalProperties"].is_object() {
        walk_children(
            at,
            &format!("{path}{{}}"),
            &schema["additionalProperties"],
            problems,
            fields,
        );
    }
}
