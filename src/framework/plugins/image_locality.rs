//! ImageLocality: prefers nodes that already have the pod's container images, weighting each image
//! by its size and by how widely it is spread (so one node holding a common image does not win).
//! From 1.37 the images of the pod's image volumes count too, each as one more image.

use std::borrow::Cow;
use std::sync::Arc;

use super::names;
use crate::emulation::{self, Minor};
use crate::framework::args::no_args;
use crate::framework::interface::{
    CycleState, MAX_NODE_SCORE, ScorePlugin, SignFragment, SignPlugin, Status, signer_names,
};
use crate::framework::plugins::helper::impl_plugin;
use crate::framework::registry::PluginRegistration;
use crate::framework::types::{ImageStateSummary, NodeInfo, PodInfo};

const MB: i64 = 1024 * 1024;
/// Below this, images are considered absent (upstream's `minThreshold`, 23 MB).
pub(crate) const MIN_THRESHOLD: i64 = 23 * MB;
/// Per container, sizes above this count as this (upstream's `maxContainerThreshold`, 1000 MB).
pub(crate) const MAX_CONTAINER_THRESHOLD: i64 = 1000 * MB;

/// Whether image volumes count, per minor (1.37's `sumImageScores` adds them).
const IMAGE_VOLUMES: &[(Minor, bool)] = &[(Minor::V1_36, false), (Minor::V1_37, true)];

#[derive(Debug)]
pub(crate) struct ImageLocality {
    image_volumes: bool,
}

impl Default for ImageLocality {
    fn default() -> ImageLocality {
        ImageLocality::at(Minor::NEWEST)
    }
}

impl ImageLocality {
    fn at(minor: Minor) -> ImageLocality {
        ImageLocality {
            image_volumes: *emulation::at(IMAGE_VOLUMES, minor),
        }
    }

    /// The pod's images: its containers' (init containers first), then, when they count, its
    /// image volumes' references.
    fn images<'p>(&self, pod: &'p PodInfo) -> impl Iterator<Item = &'p str> {
        let volumes = self
            .image_volumes
            .then(|| pod.spec().and_then(|s| s.volumes.as_ref()))
            .flatten();
        pod.images().chain(
            volumes
                .into_iter()
                .flatten()
                .filter_map(|v| v.image.as_ref())
                .map(|i| i.reference.as_deref().unwrap_or_default()),
        )
    }

    /// How many images the score is relative to: the containers, and the image volumes when
    /// they count.
    fn image_count(&self, pod: &PodInfo) -> usize {
        pod.spec().map_or(0, |s| {
            let volumes = if self.image_volumes {
                s.volumes
                    .iter()
                    .flatten()
                    .filter(|v| v.image.is_some())
                    .count()
            } else {
                0
            };
            s.containers.len() + s.init_containers.as_ref().map_or(0, Vec::len) + volumes
        })
    }
}

/// `nginx` -> `nginx:latest`; names with a tag or digest are kept (borrowed: Score asks on every
/// node).
pub(crate) fn normalized_image_name(name: &str) -> Cow<'_, str> {
    let colon = name.rfind(':').map_or(-1, |i| i as i64);
    let slash = name.rfind('/').map_or(-1, |i| i as i64);
    if colon <= slash {
        Cow::Owned(format!("{name}:latest"))
    } else {
        Cow::Borrowed(name)
    }
}

fn scaled_image_score(state: &ImageStateSummary, total_num_nodes: usize) -> i64 {
    if total_num_nodes == 0 {
        return 0;
    }
    let spread = state.num_nodes() as f64 / total_num_nodes as f64;
    (state.size as f64 * spread) as i64
}

fn sum_image_scores<'p>(
    node: &NodeInfo,
    images: impl Iterator<Item = &'p str>,
    total_num_nodes: usize,
) -> i64 {
    if node.image_states.is_empty() {
        return 0;
    }
    images
        .filter_map(|img| node.image_states.get(normalized_image_name(img).as_ref()))
        .map(|s| scaled_image_score(s, total_num_nodes))
        .sum()
}

fn calculate_priority(sum_scores: i64, image_count: usize) -> i64 {
    let max_threshold = MAX_CONTAINER_THRESHOLD * image_count as i64;
    let s = if sum_scores < MIN_THRESHOLD {
        MIN_THRESHOLD
    } else if sum_scores > max_threshold {
        max_threshold
    } else {
        sum_scores
    };
    MAX_NODE_SCORE * (s - MIN_THRESHOLD) / (max_threshold - MIN_THRESHOLD)
}

impl_plugin!(ImageLocality, names::IMAGE_LOCALITY, [Score], Sign);

impl ScorePlugin for ImageLocality {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let sum = sum_image_scores(node, self.images(pod), state.num_all_nodes());
        Ok(calculate_priority(sum, self.image_count(pod)))
    }
}

impl SignPlugin for ImageLocality {
    /// Every scored image, normalized, repeats included, and the image count: the score sums
    /// per image (upstream signs the set of names only).
    fn sign_pod(&self, pod: &PodInfo) -> Result<Vec<SignFragment>, Status> {
        let mut images: Vec<Cow<str>> = self.images(pod).map(normalized_image_name).collect();
        images.sort();
        Ok(vec![SignFragment::json(
            signer_names::IMAGE_NAMES,
            &(self.image_count(pod), images),
        )?])
    }
}

pub(crate) fn registration() -> PluginRegistration {
    PluginRegistration::new(ImageLocality::EXTENSION_POINTS, no_args, |_, handle| {
        Ok(Arc::new(ImageLocality::at(handle.emulation.minor())))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::testing::{
        NodeBuilder, PodBuilder, score_nodes, score_values, snapshot_with,
    };

    #[test]
    fn image_names() {
        assert_eq!(normalized_image_name("nginx"), "nginx:latest");
        assert_eq!(normalized_image_name("nginx:1.25"), "nginx:1.25");
        assert_eq!(
            normalized_image_name("registry:5000/app"),
            "registry:5000/app:latest"
        );
        assert_eq!(
            normalized_image_name("gcr.io/a/b@sha256:abc"),
            "gcr.io/a/b@sha256:abc"
        );
    }

    fn scores_at(
        minor: Minor,
        pod: &PodInfo,
        nodes: Vec<k8s_openapi::api::core::v1::Node>,
    ) -> Vec<i64> {
        let snap = snapshot_with(nodes, []);
        let mut state = CycleState::new();
        state.set_num_all_nodes(snap.num_nodes());
        score_values(&score_nodes(
            &ImageLocality::at(minor),
            &state,
            pod,
            snap.nodes(),
        ))
    }

    fn scores(pod: &PodInfo, nodes: Vec<k8s_openapi::api::core::v1::Node>) -> Vec<i64> {
        scores_at(Minor::NEWEST, pod, nodes)
    }

    #[test]
    fn upstream_cases() {
        // Upstream's test images: gcr.io/40 (40MB), gcr.io/300 (300MB), gcr.io/2000 (2000MB), gcr.io/10 (10MB).
        let node_40_140_2000 = || {
            NodeBuilder::new("machine1")
                .image(&["gcr.io/40:latest", "gcr.io/40:v1"], 40 * MB)
                .image(&["gcr.io/300:latest", "gcr.io/300:v1"], 300 * MB)
                .image(&["gcr.io/2000:latest"], 2000 * MB)
        };
        let node_250_10 = || {
            NodeBuilder::new("machine2")
                .image(&["gcr.io/250:latest"], 250 * MB)
                .image(&["gcr.io/10:latest", "gcr.io/10:v1"], 10 * MB)
        };
        // The scores on machine1 and machine2 of a pod with one container per image.
        let upstream_scores = |images: &[&str]| {
            let pod = images.iter().fold(PodBuilder::new("p"), |b, i| b.image(i));
            scores(
                &pod.info(),
                vec![node_40_140_2000().build(), node_250_10().build()],
            )
        };
        // Pod with gcr.io/40 and gcr.io/250:
        // machine1: 40MB * 1/2 = 20MB -> below min -> 0
        // machine2: 250MB * 1/2 = 125MB -> 100 * (125 - 23) / (2000 - 23) = 5
        assert_eq!(upstream_scores(&["gcr.io/40", "gcr.io/250"]), [0, 5]);

        // Pod with gcr.io/40 and gcr.io/10:
        // machine1: 20MB -> 0; machine2: 10MB * 1/2 = 5MB -> 0
        assert_eq!(upstream_scores(&["gcr.io/40", "gcr.io/10"]), [0, 0]);

        // Pod with gcr.io/2000 (one container): machine1 2000MB * 1/2 = 1000MB, capped at 1000MB -> 100.
        assert_eq!(upstream_scores(&["gcr.io/2000"]), [100, 0]);

        // Pod with gcr.io/2000 and gcr.io/10 (two containers):
        // machine1: 1000MB -> 100 * (1000 - 23) / (2000 - 23) = 49
        assert_eq!(upstream_scores(&["gcr.io/2000", "gcr.io/10"]), [49, 0]);
    }

    #[test]
    fn spread_counts_nodes_having_the_image() {
        // The same 500MB image on both of two nodes: spread 1 -> 500MB -> 100*(500-23)/(1000-23) = 48.
        let pod = PodBuilder::new("p").image("app:v1").info();
        let n = |name: &str| NodeBuilder::new(name).image(&["app:v1"], 500 * MB).build();
        assert_eq!(scores(&pod, vec![n("a"), n("b")]), [48, 48]);
        // On one of two nodes only: 250MB -> 23.
        assert_eq!(
            scores(&pod, vec![n("a"), NodeBuilder::new("b").build()]),
            [23, 0]
        );
    }

    /// 1.37's `sumImageScores`: an image volume's image scores like a container's and counts as
    /// one more image; 1.36 ignores image volumes.
    #[test]
    fn image_volumes_count_from_1_37() {
        let mut pod = PodBuilder::new("p").image("app:v1").build();
        if let Some(spec) = pod.spec.as_mut() {
            spec.volumes = Some(vec![k8s_openapi::api::core::v1::Volume {
                name: "model".into(),
                image: Some(k8s_openapi::api::core::v1::ImageVolumeSource {
                    reference: Some("model:v2".into()),
                    ..Default::default()
                }),
                ..Default::default()
            }]);
        }
        let pod = PodInfo::from_pod(pod);
        let node = |images: &[&str]| {
            images
                .iter()
                .fold(NodeBuilder::new("a"), |b, i| b.image(&[i], 500 * MB))
                .build()
        };
        // Only the volume's image on the node: 1.36 does not see it; 1.37 scores 500MB of two
        // images' 2000MB: 100 * (500 - 23) / (2000 - 23) = 24.
        assert_eq!(
            scores_at(Minor::V1_36, &pod, vec![node(&["model:v2"])]),
            [0]
        );
        assert_eq!(
            scores_at(Minor::V1_37, &pod, vec![node(&["model:v2"])]),
            [24]
        );
        // Only the container's image: 1.36 scores 500MB of 1000MB (48), 1.37 of 2000MB (24).
        assert_eq!(scores_at(Minor::V1_36, &pod, vec![node(&["app:v1"])]), [48]);
        assert_eq!(scores_at(Minor::V1_37, &pod, vec![node(&["app:v1"])]), [24]);
    }

    #[test]
    fn no_containers_scores_zero() {
        let pod = PodBuilder::new("p").info();
        assert_eq!(scores(&pod, vec![NodeBuilder::new("a").build()]), [0]);
    }
}
