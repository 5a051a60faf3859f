//! The ksched image, built by hack/image.sh (what `make image` runs) from the binary under test and
//! loaded from its OCI archive into a private podman storage, runs under podman with host
//! networking against the test control plane, as user 65532 on a read-only root filesystem (no
//! tmpfs either): `ksched operator` reconciles an Embedded profile whose scheduler binds a pod and
//! serves /healthz, /readyz and /metrics; `ksched scheduler --config` binds a pod.
//!
//! Skipped, with the reason printed, only when podman cannot run at all (`make testenv` installs
//! it with hack/install-podman.sh).

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use serde_json::{Value, json};

use support::nodes::Nodes;
use support::operator::{http_get, sample, wait_profile_ready};
use support::podman::{IMAGE, Podman};
use support::wait::{create_bound, poll, tail};
use support::{Components, ControlPlane, control_plane, free_port, path_str};

const NS: &str = "ksched-system";

fn cp() -> &'static ControlPlane {
    control_plane(Components::WITH_KWOK)
}

/// The image (built once per run, shared by the test binaries) loaded once per test binary, with
/// its archive; `None` (and the reason printed) when podman cannot run here.
struct Image {
    podman: Podman,
    archive: PathBuf,
    /// Mounted read-only at /etc/ksched: a self-contained admin kubeconfig.
    config_dir: PathBuf,
}

fn image() -> Option<&'static Image> {
    static IMAGE_ONCE: OnceLock<Option<Image>> = OnceLock::new();
    IMAGE_ONCE
        .get_or_init(|| {
            let cp = cp();
            let podman = Podman::new(cp.dir.join("podman"));
            if let Err(why) = podman.usable() {
                support::podman::cannot_run(&why);
                return None;
            }
            let archive = podman.load_image();

            let config_dir = cp.dir.join("image-config");
            std::fs::create_dir_all(&config_dir).expect("config dir");
            let kubeconfig = cp.kubectl_ok(&["config", "view", "--raw", "--flatten", "--minify"]);
            std::fs::write(config_dir.join("kubeconfig"), kubeconfig).expect("kubeconfig");
            world_readable(&config_dir);
            Some(Image {
                podman,
                archive,
                config_dir,
            })
        })
        .as_ref()
}

/// The files in `dir` readable by the image's user (65532).
fn world_readable(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).expect("chmod dir");
    for entry in std::fs::read_dir(dir).expect("read dir") {
        let path = entry.expect("entry").path();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    }
}

/// A container of the image, detached; removed when dropped.
struct Container<'a> {
    podman: &'a Podman,
    name: String,
}

impl<'a> Container<'a> {
    /// Runs the image with `args` as the way a cluster runs it: its own user, read-only root
    /// filesystem and no writable tmpfs, host networking, /etc/ksched mounted read-only.
    fn start(image: &'a Image, name: &str, args: &[&str]) -> Container<'a> {
        let name = format!("ksched-e2e-{name}-{}", std::process::id());
        let mount = format!("{}:/etc/ksched:ro", path_str(&image.config_dir));
        let mut run = vec![
            "run",
            "--detach",
            "--pull=never",
            "--name",
            &name,
            "--network=host",
            "--read-only",
            "--read-only-tmpfs=false",
            "--ulimit=nofile=1024:1024",
            "--ulimit=nproc=1000:1000",
            "--env=RUST_LOG=info,ksched=debug,kube_runtime=warn",
            "--volume",
            &mount,
            IMAGE,
        ];
        run.extend_from_slice(args);
        image.podman.ok(&run);
        Container {
            podman: &image.podman,
            name,
        }
    }

    fn logs(&self) -> String {
        let out = self.podman.run(&["logs", &self.name]);
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    }
}

impl Drop for Container<'_> {
    fn drop(&mut self) {
        let _ = self.podman.run(&["rm", "--force", "--time=5", &self.name]);
    }
}

fn pause_pod(name: &str, scheduler: &str) -> Pod {
    support::fixtures::pause_pod(name, scheduler, "100m", &[], json!({}))
}

#[test]
fn the_archive_is_an_oci_layout_docker_also_loads_and_runs_as_nonroot() {
    let Some(image) = image() else { return };
    let unpacked = tempfile::tempdir().expect("temp dir");
    let status = Command::new("tar")
        .arg("-xf")
        .arg(&image.archive)
        .arg("-C")
        .arg(unpacked.path())
        .status()
        .expect("run tar");
    assert!(status.success(), "tar -xf {}", image.archive.display());
    let read = |name: &str| std::fs::read(unpacked.path().join(name));
    let json = |name: &str| -> Value {
        serde_json::from_slice(&read(name).unwrap_or_else(|e| panic!("{name}: {e}")))
            .unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    let index = json("index.json");
    let manifest = json("manifest.json");
    assert!(read("oci-layout").is_ok(), "no oci-layout");
    let annotations = &index["manifests"][0]["annotations"];
    assert_eq!(
        annotations["io.containerd.image.name"],
        "docker.io/library/ksched:e2e"
    );
    assert_eq!(annotations["org.opencontainers.image.ref.name"], "e2e");
    assert_eq!(manifest[0]["RepoTags"], json!([IMAGE]));
    for blob in [&manifest[0]["Config"]]
        .into_iter()
        .chain(manifest[0]["Layers"].as_array().expect("Layers"))
    {
        let blob = blob.as_str().expect("blob path");
        assert!(
            read(blob).is_ok(),
            "manifest.json names {blob}, which is not in the archive"
        );
    }

    let inspect: Value =
        serde_json::from_str(&image.podman.ok(&["image", "inspect", IMAGE])).expect("inspect");
    let config = &inspect[0]["Config"];
    assert_eq!(config["User"], "65532:65532");
    assert_eq!(config["Entrypoint"], json!(["/usr/local/bin/ksched"]));
    let version = image.podman.ok(&[
        "run",
        "--rm",
        "--pull=never",
        "--read-only",
        "--read-only-tmpfs=false",
        "--network=host",
        "--ulimit=nofile=1024:1024",
        "--ulimit=nproc=1000:1000",
        IMAGE,
        "version",
    ]);
    assert_eq!(
        version.trim(),
        format!("ksched {}", env!("CARGO_PKG_VERSION"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_in_the_image_reconciles_an_embedded_profile_that_binds_a_pod() {
    let Some(image) = image() else { return };
    let cp = cp();
    let client = cp.client().await;
    cp.kubectl_run(&["create", "namespace", NS]);
    let nodes = Nodes::new(cp, "image-op");
    nodes.add("0", "4", &[]);
    let port = free_port();
    let port_arg = format!("--http-port={port}");
    let operator = Container::start(
        image,
        "operator",
        &[
            "operator",
            "--kubeconfig=/etc/ksched/kubeconfig",
            "--namespace",
            NS,
            "--bind-address=127.0.0.1",
            &port_arg,
        ],
    );
    let logs = || tail(&operator.logs(), 60);
    let addr = ([127, 0, 0, 1], port).into();
    poll(
        "operator /readyz",
        Duration::from_secs(120),
        logs,
        async || {
            let ready = tokio::net::TcpStream::connect(addr).await.is_ok()
                && http_get(addr, "/readyz").await.0 == 200;
            ready.then_some(())
        },
    )
    .await;
    assert_eq!(http_get(addr, "/healthz").await, (200, "ok".into()));

    cp.apply(
        "apiVersion: ksched.io/v1alpha1\nkind: SchedulerProfile\nmetadata:\n  name: image-embedded\nspec:\n  mode: Embedded\n",
    );
    wait_profile_ready(&client, "image-embedded", logs).await;
    let ns = cp.namespace(&client, "image-op").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let node = create_bound(&pods, &pause_pod("p", "image-embedded"), logs).await;
    assert!(node.starts_with("image-"), "bound to {node}");

    let (code, metrics) = http_get(addr, "/metrics").await;
    assert_eq!(code, 200);
    assert_eq!(
        sample(
            &metrics,
            r#"leader_election_master_status{name="ksched-operator"} "#
        ),
        Some(1.0),
        "{metrics}"
    );
    assert!(
        metrics.contains("ksched_operator_queue_depth{controller=\"schedulerprofile\"}"),
        "{metrics}"
    );
    cp.kubectl_ok(&[
        "delete",
        "schedulerprofile",
        "image-embedded",
        "--wait=true",
    ]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_in_the_image_binds_a_pod() {
    let Some(image) = image() else { return };
    let cp = cp();
    let client = cp.client().await;
    let nodes = Nodes::new(cp, "image-sched");
    nodes.add("0", "4", &[]);
    let ns = cp.namespace(&client, "image-sched").await;
    let config = support::scheduler::config("image-sched", Some(&ns));
    // The config sits beside the kubeconfig, mounted read-only.
    std::fs::write(image.config_dir.join("image-sched.yaml"), config).expect("config");
    world_readable(&image.config_dir);
    let port_arg = format!("--secure-port={}", free_port());
    let scheduler = Container::start(
        image,
        "scheduler",
        &[
            "scheduler",
            "--config=/etc/ksched/image-sched.yaml",
            "--kubeconfig=/etc/ksched/kubeconfig",
            "--bind-address=127.0.0.1",
            &port_arg,
        ],
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let node = create_bound(&pods, &pause_pod("p", "image-sched"), || {
        tail(&scheduler.logs(), 60)
    })
    .await;
    assert!(node.starts_with("image-"), "bound to {node}");
}
