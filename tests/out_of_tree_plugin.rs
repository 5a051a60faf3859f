//! Out-of-tree plugins. The example (`examples/custom_plugin.rs`) built with cargo and run as the
//! full scheduler against the real control plane: its `PreferLabeled` Score plugin decides
//! placement, and its `NodeWeights` plugin scores from a kind it watches itself (ConfigMaps with
//! its label). And a plugin written and unit-tested as its author would, with `ksched::prelude`
//! and the `testing` feature's builders only.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use ksched::prelude::testing::{NodeBuilder, PodBuilder, handle};
use ksched::prelude::*;
use kube::api::{Api, DeleteParams, PostParams};
use serde::{Deserialize, Serialize};
use serde_json::json;
use support::fixtures::pause_pod;
use support::helm;
use support::nodes::Nodes;
use support::operator::{OPERATOR_SA, kubeconfig_as, wait_profile_condition, wait_profile_ready};
use support::process::LoggedChild;
use support::scheduler::{ksched_bin, scheduler_command};
use support::wait::{create_bound, wait_log};
use support::{Components, ControlPlane, control_plane, repo_root};

/// Builds the example and returns its path.
fn build_example() -> PathBuf {
    let out = Command::new(env!("CARGO"))
        .args([
            "build",
            "--example",
            "custom_plugin",
            "--message-format=short",
        ])
        .current_dir(repo_root())
        .output()
        .expect("cargo build --example custom_plugin");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"));
    target.join("debug").join("examples").join("custom_plugin")
}

const CONFIG: &str = r#"apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: false
profiles:
- schedulerName: labeled-scheduler
  plugins:
    score:
      enabled:
      - name: PreferLabeled
        weight: 10
  pluginConfig:
  - name: PreferLabeled
    args:
      label: example.com/preferred
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_plugin_decides_placement() {
    let bin = build_example();
    let cp = control_plane(Components::WITH_KWOK);
    let client = cp.client().await;
    let ns = cp.namespace(&client, "oot").await;
    let nodes = Nodes::new(cp, "oot");
    // The default scorers prefer the big, empty node; the plugin prefers the labeled small one.
    nodes.add("big", "64", &[]);
    let labeled = nodes.add("small", "4", &[("example.com/preferred", "yes")]);

    let config = cp.dir.join("custom-plugin-config.yaml");
    std::fs::write(&config, CONFIG).expect("config");
    let mut cmd = scheduler_command(&bin, cp, &config);
    cmd.args(["--secure-port=0", "--v=4"]);
    let example = LoggedChild::spawn(cmd, cp.dir.join("custom-plugin.log"));
    wait_log(|| example.logs(), "starting to schedule").await;

    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    for i in 0..3 {
        let name = format!("p{i}");
        let node = create_bound(
            &pods,
            &pause_pod(&name, "labeled-scheduler", "500m", &[], json!({})),
            || example.logs(),
        )
        .await;
        assert_eq!(node, labeled, "{}", example.logs());
    }
    drop(nodes);
}

const WEIGHTS_CONFIG: &str = r#"apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: false
profiles:
- schedulerName: weights-scheduler
  plugins:
    multiPoint:
      enabled:
      - name: NodeWeights
        weight: 10
"#;

/// A ConfigMap of node weights as `NodeWeights` reads them.
fn weights(name: &str, ns: &str, data: &[(&str, &str)]) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns,
                     "labels": {"example.com/node-weights": "true"}},
        "data": data.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
    }))
    .expect("ConfigMap")
}

/// The example's `NodeWeights` reads a kind no in-tree plugin reads: the ConfigMaps present when
/// the scheduler starts decide the first placement (its informer listed them before scheduling
/// began), and one created later decides the next once its watch delivers it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_out_of_tree_plugin_scores_from_the_kind_it_watches() {
    let bin = build_example();
    let cp = control_plane(Components::WITH_KWOK);
    let client = cp.client().await;
    let ns = cp.namespace(&client, "oot-weights").await;
    let nodes = Nodes::new(cp, "oot-weights");
    // The default scorers prefer the big, empty node; the weights say otherwise.
    nodes.add("big", "64", &[]);
    let small = nodes.add("small", "4", &[]);
    let medium = nodes.add("medium", "8", &[]);
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    config_maps
        .create(
            &PostParams::default(),
            &weights("first", &ns, &[(&small, "100")]),
        )
        .await
        .expect("weights");

    let config = cp.dir.join("node-weights-config.yaml");
    std::fs::write(&config, WEIGHTS_CONFIG).expect("config");
    let mut cmd = scheduler_command(&bin, cp, &config);
    cmd.args(["--secure-port=0", "--v=4"]);
    let example = LoggedChild::spawn(cmd, cp.dir.join("node-weights.log"));
    wait_log(|| example.logs(), "starting to schedule").await;

    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pod = |name: &str| pause_pod(name, "weights-scheduler", "100m", &[], json!({}));
    let node = create_bound(&pods, &pod("listed"), || example.logs()).await;
    assert_eq!(node, small, "{}", example.logs());

    // A second ConfigMap weighs the medium node higher; the watch brings it in.
    config_maps
        .delete("first", &DeleteParams::default())
        .await
        .expect("delete weights");
    config_maps
        .create(
            &PostParams::default(),
            &weights("second", &ns, &[(&medium, "100")]),
        )
        .await
        .expect("weights");
    let mut placed = Vec::new();
    for attempt in 0..20 {
        let name = format!("watched-{attempt}");
        let node = create_bound(&pods, &pod(&name), || example.logs()).await;
        placed.push(node.clone());
        if node == medium {
            break;
        }
    }
    assert_eq!(placed.last(), Some(&medium), "placed on {placed:?}");
    drop(nodes);
}

/// A SchedulerProfile enabling the example's `NodeWeights`, which watches ConfigMaps.
fn weighted_profile(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: ksched.io/v1alpha1\nkind: SchedulerProfile\nmetadata:\n  name: {name}\nspec:\n{spec}  plugins:\n    multiPoint:\n      enabled:\n      - name: NodeWeights\n        weight: 10\n"
    )
}

/// `render -f profile.yaml` of `bin`: (success, stdout, stderr).
fn render(bin: &Path, profile: &str) -> (bool, String, String) {
    let path = std::env::temp_dir().join(format!("oot-profile-{}.yaml", std::process::id()));
    std::fs::write(&path, profile).expect("write profile");
    let out = Command::new(bin)
        .args(["render", "--namespace", OPERATOR_NAMESPACE, "-f"])
        .arg(&path)
        .output()
        .expect("render");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `ksched render` knows the in-tree plugins only and names the one it does not know; the same
/// command of a binary built with `ksched_main` and its own plugins renders the profile: the image
/// the profile names, and a ClusterRole granting the kind its plugin watches.
#[test]
fn a_binary_with_its_own_plugins_renders_profiles_that_name_them() {
    let profile = weighted_profile(
        "weighted",
        "  mode: Deployment\n  image: registry.example/ksched-weights:1\n",
    );
    let (ok, _, err) = render(&ksched_bin(), &profile);
    assert!(
        !ok && err.contains("unknown plugin \"NodeWeights\""),
        "{err}"
    );

    let (ok, out, err) = render(&build_example(), &profile);
    assert!(ok, "{err}");
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&out).expect("rendered YAML");
    let kind = |k: &str| {
        docs.iter()
            .find(|d| d["kind"] == k)
            .unwrap_or_else(|| panic!("no {k} in {out}"))
    };
    assert_eq!(
        kind("Deployment")["spec"]["template"]["spec"]["containers"][0]["image"],
        "registry.example/ksched-weights:1"
    );
    let grants_configmaps = kind("ClusterRole")["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .any(|r| {
            r["apiGroups"] == json!([""])
                && r["resources"] == json!(["configmaps"])
                && r["verbs"] == json!(["list", "watch"])
        });
    assert!(grants_configmaps, "{out}");
    assert!(
        kind("ConfigMap")["data"]["config.yaml"]
            .as_str()
            .is_some_and(|c| c.contains("NodeWeights")),
        "{out}"
    );
}

const OPERATOR_NAMESPACE: &str = "ksched-system";

/// The chart's objects that give the operator its identity and permissions (ServiceAccount,
/// roles, bindings, admission policy), rendered with `set_json` values and applied.
fn apply_operator_rbac(cp: &ControlPlane, set_json: &[&str]) {
    let chart = helm::chart();
    let mut args = vec![
        "template",
        "ksched",
        &chart,
        "--namespace",
        OPERATOR_NAMESPACE,
    ];
    for value in set_json {
        args.extend(["--set-json", value]);
    }
    let out = helm::helm_ok(None, &args);
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&out).expect("chart YAML");
    let identity = [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ];
    let list = json!({"apiVersion": "v1", "kind": "List", "items": docs
        .into_iter()
        .filter(|d| d["kind"].as_str().is_some_and(|k| identity.contains(&k)))
        .collect::<Vec<_>>()});
    let (ok, _, err) = cp.kubectl_stdin(
        &["apply", "--server-side", "--force-conflicts", "-f", "-"],
        &list.to_string(),
    );
    assert!(ok, "applying the chart's RBAC: {err}");
}

/// The example binary run as the operator, with the chart's RBAC: a SchedulerProfile enabling its
/// `NodeWeights` (which watches ConfigMaps) stalls while the operator may not grant ConfigMaps,
/// with a message that names the rules and the chart value; once `extraSchedulerRules` grants
/// them, the profile becomes Ready and its scheduler (Embedded, inside that operator) places a pod
/// by the weights.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduler_profile_names_a_plugin_the_operators_binary_was_built_with() {
    let bin = build_example();
    let cp = control_plane(Components::WITH_KWOK);
    let client = cp.client().await;
    let _ = cp.kubectl_run(&["create", "namespace", OPERATOR_NAMESPACE]);
    apply_operator_rbac(cp, &[]);
    let ns = cp.namespace(&client, "oot-profile").await;
    let nodes = Nodes::new(cp, "oot-profile");
    let here = [("oot-profile", "yes")];
    nodes.add("big", "64", &here);
    let small = nodes.add("small", "4", &here);
    Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .create(
            &PostParams::default(),
            &weights("profile-weights", &ns, &[(&small, "100")]),
        )
        .await
        .expect("weights");

    let mut cmd = Command::new(&bin);
    cmd.arg("operator")
        .arg("--kubeconfig")
        .arg(kubeconfig_as(cp, OPERATOR_SA))
        .args([
            "--namespace",
            OPERATOR_NAMESPACE,
            "--http-port=0",
            "--leader-elect=false",
            "--image=ksched-weights:e2e",
        ]);
    let operator = LoggedChild::spawn(cmd, cp.dir.join("oot-operator.log"));
    let name = "oot-weighted";
    cp.apply(&weighted_profile(name, "  mode: Embedded\n"));
    wait_profile_condition(
        &client,
        name,
        "Stalled for the operator's rules",
        || operator.logs(),
        |c| {
            c.type_ == "Stalled"
                && c.reason == "ApplyFailed"
                && c.message.contains("configmaps")
                && c.message.contains("extraSchedulerRules")
        },
    )
    .await;

    apply_operator_rbac(
        cp,
        &[
            r#"extraSchedulerRules=[{"apiGroups":[""],"resources":["configmaps"],"verbs":["list","watch"]}]"#,
        ],
    );
    wait_profile_ready(&client, name, || operator.logs()).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pod = pause_pod(
        "weighed",
        name,
        "100m",
        &[],
        json!({"nodeSelector": {"oot-profile": "yes"}}),
    );
    let node = create_bound(&pods, &pod, || operator.logs()).await;
    assert_eq!(node, small, "{}", operator.logs());
    drop(nodes);
}

/// `RequireLabel`: a Filter plugin keeping pods off nodes without a label, as an out-of-tree
/// author writes it.
struct RequireLabel {
    label: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RequireLabelArgs {
    label: String,
}

impl PluginArgs for RequireLabelArgs {
    const KIND: &'static str = "RequireLabelArgs";

    fn validate(&self) -> Vec<FieldError> {
        if self.label.is_empty() {
            return vec![required("label", "a node label key is needed")];
        }
        Vec::new()
    }
}

impl_plugin!(RequireLabel, "RequireLabel", [Filter]);

impl FilterPlugin for RequireLabel {
    fn filter(&self, _: &CycleState, _: &PodInfo, node: &NodeInfo) -> Status {
        if node.labels().is_some_and(|l| l.contains_key(&self.label)) {
            Status::success()
        } else {
            Status::new(Code::UnschedulableAndUnresolvable, "node(s) lack the label")
        }
    }
}

fn require_label() -> PluginRegistration {
    PluginRegistration::new(
        RequireLabel::EXTENSION_POINTS,
        decode::<RequireLabelArgs>,
        |args, _| {
            let args: RequireLabelArgs = typed(args)?;
            if args.label.contains(' ') {
                return Err(PluginError::Init(format!(
                    "{:?} is not a label key",
                    args.label
                )));
            }
            Ok(Arc::new(RequireLabel { label: args.label }) as Arc<dyn Plugin>)
        },
    )
}

#[test]
fn a_plugin_written_with_the_prelude_registers_and_filters() {
    let mut registry = Registry::in_tree();
    registry
        .register("RequireLabel", require_label())
        .expect("a new name");
    assert_eq!(
        registry.register("RequireLabel", require_label()),
        Err(RegistryError::Duplicate("RequireLabel".into()))
    );
    let registration = require_label();
    // Args: strict, defaulted and validated as an in-tree plugin's.
    let errs = (registration.decode_args)(Some(&json!({})), &Emulation::default())
        .expect_err("label missing");
    assert_eq!(errs[0].path, "label");
    assert!(
        (registration.decode_args)(
            Some(&json!({"label": "a", "lable": "b"})),
            &Emulation::default()
        )
        .is_err()
    );
    let args = (registration.decode_args)(
        Some(&json!({"label": "example.com/ssd"})),
        &Emulation::default(),
    )
    .expect("valid");
    // Its factory's error, typed.
    let (h, _) = handle();
    let bad = json!({"label": "not a key"});
    assert_eq!(
        (registration.factory)(&bad, &h).err(),
        Some(PluginError::Init("\"not a key\" is not a label key".into()))
    );
    let plugin = (registration.factory)(&args, &h).expect("plugin");
    assert_eq!(plugin.name(), "RequireLabel");
    let filter = plugin.as_filter().expect("a Filter plugin");
    let pod = PodBuilder::new("p").info();
    let ssd = NodeBuilder::new("ssd")
        .label("example.com/ssd", "true")
        .info(vec![]);
    let plain = NodeBuilder::new("plain").info(vec![]);
    let state = CycleState::new();
    assert!(filter.filter(&state, &pod, &ssd).is_success());
    assert_eq!(
        filter.filter(&state, &pod, &plain).code(),
        Code::UnschedulableAndUnresolvable
    );
}
