//! Runs manifests/argocd/health.lua the way Argo CD does (global `obj`, the script's returned table)
//! with Debian's Lua (`hack/install-lua.sh`). Included with `#[path]` by the tests that need it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The Lua interpreter on PATH.
pub fn lua() -> PathBuf {
    for name in ["lua5.4", "lua5.3", "lua5.1", "lua"] {
        if let Ok(out) = Command::new("sh")
            .args(["-c", &format!("command -v {name}")])
            .output()
            && out.status.success()
        {
            return PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        }
    }
    panic!("no Lua interpreter: run hack/install-lua.sh (make testenv does)");
}

/// `obj` as a Lua table constructor.
pub fn to_lua(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Null => "nil".into(),
        serde_json::Value::Bool(b) => b.to_string(),
        serde_json::Value::Number(n) => n.to_string(),
        serde_json::Value::String(s) => format!("{s:?}"),
        serde_json::Value::Array(a) => {
            let items: Vec<String> = a.iter().map(to_lua).collect();
            format!("{{{}}}", items.join(", "))
        }
        serde_json::Value::Object(o) => {
            let items: Vec<String> = o
                .iter()
                .map(|(k, v)| format!("[{k:?}] = {}", to_lua(v)))
                .collect();
            format!("{{{}}}", items.join(", "))
        }
    }
}

/// (status, message) the health script returns for `obj`.
pub fn health(script: &Path, obj: &serde_json::Value) -> (String, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let wrapper = dir.path().join("run.lua");
    let program = format!(
        "obj = {}\nlocal f = assert(loadfile({:?}))\nlocal hs = f()\nio.write(hs.status, \"\\n\", hs.message or \"\", \"\\n\")\n",
        to_lua(obj),
        script.display().to_string()
    );
    std::fs::write(&wrapper, program).expect("write wrapper");
    let out = Command::new(lua()).arg(&wrapper).output().expect("run lua");
    assert!(
        out.status.success(),
        "lua failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut lines = text.lines();
    (
        lines.next().unwrap_or_default().to_string(),
        lines.next().unwrap_or_default().to_string(),
    )
}
