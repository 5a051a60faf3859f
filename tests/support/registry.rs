//! A container registry on loopback: Debian's `docker-registry` (the CNCF distribution registry,
//! which also stores OCI artifacts such as Helm charts), installed by hack/install-registry.sh,
//! serving plain HTTP on a free port with its storage under the control plane's directory.
//! Images go in with skopeo (from the OCI archive `make image` writes), charts with `helm push`.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::process::LoggedChild;
use super::wait::poll;
use super::{ControlPlane, free_port, path_str};

pub struct Registry {
    /// `127.0.0.1:<port>`, the registry's host in image references and `oci://` URLs.
    pub host: String,
    process: LoggedChild,
}

impl Registry {
    /// Starts the registry and waits until it answers `/v2/`. Err: it is not installed.
    pub async fn start(cp: &ControlPlane) -> Result<Registry, String> {
        let binary = which("docker-registry").ok_or(
            "docker-registry is not installed; make testenv installs it (hack/install-registry.sh)",
        )?;
        let port = free_port();
        let host = format!("127.0.0.1:{port}");
        let dir = cp.dir.join("registry");
        std::fs::create_dir_all(dir.join("storage")).map_err(|e| e.to_string())?;
        let config = dir.join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {host}\n",
                dir.join("storage").display()
            ),
        )
        .map_err(|e| e.to_string())?;
        let mut cmd = Command::new(binary);
        cmd.args(["serve", path_str(&config)]);
        let process = LoggedChild::spawn(cmd, dir.join("registry.log"));
        let registry = Registry { host, process };
        let addr = ([127, 0, 0, 1], port).into();
        poll(
            "the registry answers /v2/",
            Duration::from_secs(30),
            || registry.logs(),
            async || {
                let up = tokio::net::TcpStream::connect(addr).await.is_ok()
                    && super::operator::http_get(addr, "/v2/").await.0 == 200;
                up.then_some(())
            },
        )
        .await;
        Ok(registry)
    }

    pub fn logs(&self) -> String {
        self.process.logs()
    }

    /// Pushes the image in OCI `archive` as `<host>/<name>` (`name` is `repository:tag`) with
    /// skopeo; returns the full reference.
    pub fn push_archive(&self, archive: &Path, name: &str) -> String {
        let reference = format!("{}/{name}", self.host);
        let out = Command::new("skopeo")
            .args(["copy", "--quiet", "--dest-tls-verify=false"])
            .arg(format!("oci-archive:{}", path_str(archive)))
            .arg(format!("docker://{reference}"))
            .output()
            .expect("run skopeo (make testenv installs it)");
        assert!(
            out.status.success(),
            "skopeo copy to {reference}: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.logs()
        );
        reference
    }
}

fn which(name: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .chain([std::path::PathBuf::from("/usr/bin")])
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}
