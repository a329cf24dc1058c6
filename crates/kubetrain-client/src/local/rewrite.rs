//! String rewrites that make a pod's command and env work on one machine: `$(VAR)` expansion as the
//! kubelet does it, pod DNS names to loopback, declared pod ports to free local ports, `/workspace` to the
//! run directory.

use std::collections::{BTreeMap, BTreeSet};

/// Expands `$(NAME)` references the way the kubelet does: defined names are replaced, undefined ones are
/// kept verbatim, `$$` is an escaped `$`.
pub fn expand(input: &str, lookup: impl Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(body) = after.strip_prefix('(')
            && let Some(end) = body.find(')')
        {
            let name = &body[..end];
            match lookup(name) {
                Some(v) => out.push_str(&v),
                None => {
                    out.push_str("$(");
                    out.push_str(name);
                    out.push(')');
                }
            }
            rest = &body[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// The pod addresses of one JobSet and what they become locally.
#[derive(Clone, Debug, Default)]
pub struct Network {
    /// Pod host names (`<job>-<rjob>-<jobIndex>-<podIndex>`).
    pub hosts: BTreeSet<String>,
    /// The headless service (`spec.network.subdomain`, default the JobSet name).
    pub subdomain: String,
    /// The loopback address every pod name resolves to.
    pub loopback: String,
    /// Declared container port → the free local port used instead (empty: ports kept).
    pub ports: BTreeMap<i32, u16>,
}

fn is_host_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_'
}

impl Network {
    /// Whether `host` names a pod of this JobSet: `<pod>`, `<pod>.<subdomain>` or a longer FQDN of it.
    pub fn is_pod_host(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.');
        let (first, rest) = host.split_once('.').unwrap_or((host, ""));
        self.hosts.contains(first)
            && (rest.is_empty()
                || rest == self.subdomain
                || rest.starts_with(&format!("{}.", self.subdomain)))
    }

    /// Maps a declared pod port to its local port (unchanged when not remapped).
    pub fn port(&self, port: i32) -> i32 {
        self.ports.get(&port).map_or(port, |p| i32::from(*p))
    }

    /// Rewrites every pod address in `text` (`host`, `host.subdomain[...]`, optionally `:port`) to loopback,
    /// with the port remapped.
    pub fn rewrite_hosts(&self, text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(start) = rest.find(is_host_char) {
            out.push_str(&rest[..start]);
            let token_len = rest[start..]
                .find(|c| !is_host_char(c))
                .unwrap_or(rest.len() - start);
            let token = &rest[start..start + token_len];
            rest = &rest[start + token_len..];
            if !self.is_pod_host(token) {
                out.push_str(token);
                continue;
            }
            out.push_str(&self.loopback);
            // `host:port`: remap a declared port.
            if let Some(after) = rest.strip_prefix(':') {
                let digits = after
                    .find(|c: char| !c.is_ascii_digit())
                    .unwrap_or(after.len());
                if let Ok(port) = after[..digits].parse::<i32>() {
                    out.push(':');
                    out.push_str(&self.port(port).to_string());
                    rest = &after[digits..];
                }
            }
        }
        out.push_str(rest);
        out
    }

    /// Rewrites one env var: pod addresses everywhere; a `*PORT` variable holding a declared port is remapped.
    pub fn rewrite_env(&self, name: &str, value: &str) -> String {
        if name.ends_with("PORT")
            && let Ok(port) = value.trim().parse::<i32>()
            && self.ports.contains_key(&port)
        {
            return self.port(port).to_string();
        }
        self.rewrite_hosts(value)
    }
}

/// Replaces the path `from` (as a whole path component prefix) by `to` wherever it appears in `text`.
pub fn map_path(text: &str, from: &str, to: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(from) {
        let before_ok =
            i == 0 || !rest[..i].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '/');
        let after = &rest[i + from.len()..];
        let after_ok = after.is_empty()
            || after.starts_with(|c: char| {
                !(c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
            });
        out.push_str(&rest[..i]);
        out.push_str(if before_ok && after_ok { to } else { from });
        rest = after;
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // The examples that were doctests before the module became crate-private.
    #[test]
    fn expand_replaces_defined_names_keeps_undefined_ones_and_unescapes_dollars() {
        let lookup = |k: &str| (k == "RANK").then(|| "3".to_string());
        assert_eq!(
            expand("--rank=$(RANK) $(OTHER) $$(RANK)", lookup),
            "--rank=3 $(OTHER) $(RANK)"
        );
    }

    #[test]
    fn rewrite_hosts_maps_pod_addresses_to_loopback_with_their_ports() {
        let net = Network {
            hosts: ["job-node-0-0".to_string()].into(),
            subdomain: "job".into(),
            loopback: "127.0.0.1".into(),
            ports: [(29500, 40001)].into(),
        };
        assert_eq!(
            net.rewrite_hosts("tcp://job-node-0-0.job:29500/x"),
            "tcp://127.0.0.1:40001/x"
        );
        assert_eq!(
            net.rewrite_hosts("job-node-0-0.job.default.svc"),
            "127.0.0.1"
        );
        assert_eq!(
            net.rewrite_hosts("/data/job-node-0-0.jobs"),
            "/data/job-node-0-0.jobs"
        );
    }

    #[test]
    fn map_path_replaces_whole_path_components_only() {
        assert_eq!(
            map_path(
                "--data=/workspace/dataset",
                "/workspace",
                "/tmp/run/workspace"
            ),
            "--data=/tmp/run/workspace/dataset"
        );
        assert_eq!(
            map_path("/workspaces/x", "/workspace", "/tmp/w"),
            "/workspaces/x"
        );
    }

    fn net() -> Network {
        Network {
            hosts: ["j-node-0-0", "j-node-0-1"]
                .into_iter()
                .map(String::from)
                .collect(),
            subdomain: "j".into(),
            loopback: "127.0.0.1".into(),
            ports: [(29500, 41000)].into(),
        }
    }

    #[test]
    fn host_rewrites() {
        let n = net();
        let table = [
            ("j-node-0-0.j", "127.0.0.1"),
            ("j-node-0-1", "127.0.0.1"),
            ("j-node-0-0.j:29500", "127.0.0.1:41000"),
            ("j-node-0-0.j:1234", "127.0.0.1:1234"),
            (
                "j-node-0-0.j.default.svc.cluster.local:29500",
                "127.0.0.1:41000",
            ),
            ("a=j-node-0-0.j,b=j-node-0-1.j", "a=127.0.0.1,b=127.0.0.1"),
            ("j-node-0-2.j", "j-node-0-2.j"),
            ("x-j-node-0-0.j", "x-j-node-0-0.j"),
            ("j-node-0-0.other", "j-node-0-0.other"),
            ("", ""),
        ];
        for (input, want) in table {
            assert_eq!(n.rewrite_hosts(input), want, "{input}");
        }
    }

    #[test]
    fn env_ports() {
        let n = net();
        assert_eq!(n.rewrite_env("PET_MASTER_PORT", "29500"), "41000");
        assert_eq!(n.rewrite_env("PET_MASTER_PORT", "8080"), "8080");
        assert_eq!(n.rewrite_env("OTHER", "29500"), "29500");
    }

    #[test]
    fn expansion_edge_cases() {
        let l = |k: &str| (k == "A").then(|| "x".to_string());
        let table = [
            ("$(A)", "x"),
            ("$(A", "$(A"),
            ("$", "$"),
            ("$$", "$"),
            ("a$b", "a$b"),
            ("$(B)$(A)", "$(B)x"),
            ("$$$(A)", "$x"),
        ];
        for (input, want) in table {
            assert_eq!(expand(input, l), want, "{input}");
        }
    }

    #[test]
    fn paths() {
        let table = [
            ("/workspace", "/r"),
            ("/workspace/", "/r/"),
            ("a:/workspace/m", "a:/r/m"),
            ("/x/workspace", "/x/workspace"),
            ("/workspace2", "/workspace2"),
        ];
        for (input, want) in table {
            assert_eq!(map_path(input, "/workspace", "/r"), want, "{input}");
        }
    }
}
