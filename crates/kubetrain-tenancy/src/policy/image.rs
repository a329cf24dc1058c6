//! Image references against registry prefixes.

/// An image reference with Docker Hub's implied parts spelled out, so prefixes compare on the full name:
/// `busybox` is `docker.io/library/busybox`, `pytorch/pytorch:2.5` is `docker.io/pytorch/pytorch:2.5`,
/// `index.docker.io/x/y` is `docker.io/x/y`; references that name a registry are kept.
pub(crate) fn normalize_image(image: &str) -> String {
    let image = image.trim();
    match image.split_once('/') {
        None => format!("docker.io/library/{image}"),
        Some(("index.docker.io", rest)) => format!("docker.io/{rest}"),
        Some((first, _)) if first.contains('.') || first.contains(':') || first == "localhost" => {
            image.to_owned()
        }
        Some(_) => format!("docker.io/{image}"),
    }
}

/// Whether a normalized image matches a registry prefix: `*` matches any image; a prefix ending in `/`
/// matches what starts with it; any other prefix matches itself and what continues it with `/`, `:` or `@`
/// (so `ghcr.io/kubeflow` matches `ghcr.io/kubeflow/trainer` but not `ghcr.io/kubeflow-fork/trainer`).
pub(crate) fn image_matches(image: &str, prefix: &str) -> bool {
    let prefix = prefix.trim();
    if prefix == "*" {
        return true;
    }
    if prefix.ends_with('/') {
        return image.starts_with(prefix);
    }
    match image.strip_prefix(prefix) {
        Some("") => true,
        Some(rest) => rest.starts_with(['/', ':', '@']),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::{image_matches, normalize_image};

    #[test]
    fn docker_hub_names_are_spelled_out() {
        for (given, full) in [
            ("busybox:1.36", "docker.io/library/busybox:1.36"),
            ("pytorch/pytorch", "docker.io/pytorch/pytorch"),
            ("ghcr.io/kubeflow/trainer", "ghcr.io/kubeflow/trainer"),
            ("localhost:5000/x", "localhost:5000/x"),
        ] {
            assert_eq!(normalize_image(given), full, "{given}");
        }
    }

    #[test]
    fn prefixes_match_whole_path_segments() {
        assert!(image_matches(
            "ghcr.io/kubeflow/trainer:v2",
            "ghcr.io/kubeflow"
        ));
        assert!(image_matches(
            "ghcr.io/kubeflow/trainer:v2",
            "ghcr.io/kubeflow/"
        ));
        assert!(!image_matches(
            "ghcr.io/kubeflow-fork/trainer",
            "ghcr.io/kubeflow"
        ));
        assert!(image_matches(
            "docker.io/library/busybox:1",
            "docker.io/library/busybox"
        ));
        assert!(image_matches("anything", "*"));
    }
}
