//! kwok nodes owned by one test: named `<test>-<suffix>`, labelled `ksched.io/e2e=<test>`, deleted
//! (by that label) when dropped, so tests of one binary do not see each other's nodes.

use super::ControlPlane;
use super::fixtures::kwok_node;

/// The label every node of a test carries.
pub const TEST_LABEL: &str = "ksched.io/e2e";

/// The nodes of one test; deleted when dropped.
pub struct Nodes {
    cp: &'static ControlPlane,
    test: String,
    memory: String,
    wait_on_drop: bool,
}

impl Nodes {
    pub fn new(cp: &'static ControlPlane, test: &str) -> Nodes {
        Nodes {
            cp,
            test: test.to_string(),
            memory: "32Gi".into(),
            wait_on_drop: false,
        }
    }

    /// Nodes added from now on have `memory` (32Gi by default).
    pub fn with_memory(mut self, memory: &str) -> Nodes {
        self.memory = memory.into();
        self
    }

    /// Dropping waits (up to 60s) until the nodes are gone, so the next test's scheduler sees only
    /// its own nodes.
    pub fn waiting_on_drop(mut self) -> Nodes {
        self.wait_on_drop = true;
        self
    }

    /// The test's id (the value of [`TEST_LABEL`]).
    pub fn test(&self) -> &str {
        &self.test
    }

    /// Adds the node `<test>-<suffix>` with `cpu` cores and extra `labels`, without waiting.
    pub fn create(&self, suffix: &str, cpu: &str, labels: &[(&str, &str)]) -> String {
        let name = format!("{}-{suffix}", self.test);
        let mut all = vec![(TEST_LABEL, self.test.as_str())];
        all.extend_from_slice(labels);
        self.cp.apply(&kwok_node(&name, cpu, &self.memory, &all));
        name
    }

    /// Adds the node `<test>-<suffix>` with `cpu` cores and extra `labels`; waits until it is Ready.
    pub fn add(&self, suffix: &str, cpu: &str, labels: &[(&str, &str)]) -> String {
        let name = self.create(suffix, cpu, labels);
        self.wait_ready_selected(&format!("node/{name}"), &[]);
        name
    }

    /// Waits until every node of the test is Ready.
    pub fn wait_ready(&self) {
        self.wait_ready_selected("nodes", &["-l", &self.selector()]);
    }

    fn wait_ready_selected(&self, what: &str, selector: &[&str]) {
        let mut args = vec!["wait", "--for=condition=Ready", "--timeout=60s", what];
        args.extend_from_slice(selector);
        let (ok, _, err) = self.cp.kubectl_run(&args);
        assert!(ok, "{what} {selector:?} not Ready: {err}");
    }

    /// Taints `node` (`key[=value]:effect`).
    pub fn taint(&self, node: &str, taint: &str) {
        self.cp.kubectl_ok(&["taint", "nodes", node, taint]);
    }

    /// Annotates `node` with `key=value`.
    pub fn annotate(&self, node: &str, annotation: &str) {
        self.cp.kubectl_ok(&["annotate", "node", node, annotation]);
    }

    fn selector(&self) -> String {
        format!("{TEST_LABEL}={}", self.test)
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        let selector = self.selector();
        let mut args = vec!["delete", "nodes", "-l", &selector];
        if self.wait_on_drop {
            args.extend(["--wait=true", "--timeout=60s"]);
        } else {
            args.push("--wait=false");
        }
        let _ = self.cp.kubectl_run(&args);
    }
}
