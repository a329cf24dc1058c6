//! The one thing ranks read from an Open MPI hostfile: its first host, where `mpirun` places rank 0.

/// The first host of an Open MPI hostfile (`<host> [slots=N] [max_slots=M]` per line, `#` comments, blank
/// lines), as the MPI plugin's renderer writes it: `<job>-node-0-0.<job> slots=<n>`.
///
/// ```
/// use kubetrain_collective::rendezvous::hostfile_first_host;
///
/// let text = "# written by the renderer\n\njob-node-0-0.job slots=4 # rank 0 is here\njob-node-0-1.job slots=4\n";
/// assert_eq!(hostfile_first_host(text), Ok("job-node-0-0.job"));
/// assert!(hostfile_first_host("# nothing\n").unwrap_err().to_string().contains("no host line"));
/// ```
pub fn first_host(text: &str) -> Result<&str, HostfileError> {
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or_default().trim();
        let Some(host) = line.split_whitespace().next() else {
            continue;
        };
        if host.contains('=') {
            return Err(HostfileError::SettingFirst {
                line: i + 1,
                text: raw.to_string(),
            });
        }
        return Ok(host);
    }
    Err(HostfileError::NoHost)
}

/// Why [`first_host`] found no host.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HostfileError {
    /// The first non-comment line starts with a `key=value` setting.
    #[error(
        "line {line}: {text:?} starts with a setting, not a host name; expected \"<host> slots=<n>\""
    )]
    SettingFirst {
        /// The line number, from 1.
        line: usize,
        /// The line as written.
        text: String,
    },
    /// Only comments and blank lines.
    #[error("the file has no host line; expected \"<host> slots=<n>\" lines")]
    NoHost,
}

#[cfg(test)]
mod tests {
    use super::first_host;

    #[test]
    fn first_host_of_each_shape() {
        let cases: [(&str, Result<&str, &str>); 7] = [
            ("a slots=2\nb slots=2\n", Ok("a")),
            ("  \t a.b.svc  slots=1 max_slots=2\n", Ok("a.b.svc")),
            (
                "# comment\n\n   # indented comment\nnode-0 # trailing\n",
                Ok("node-0"),
            ),
            ("10.0.0.7\r\n", Ok("10.0.0.7")),
            ("", Err("no host line")),
            ("#\n \n", Err("no host line")),
            (
                "slots=2 a\n",
                Err("line 1: \"slots=2 a\" starts with a setting"),
            ),
        ];
        for (text, want) in cases {
            match (first_host(text), want) {
                (Ok(got), Ok(want)) => assert_eq!(got, want, "{text:?}"),
                (Err(got), Err(want)) => {
                    assert!(got.to_string().contains(want), "{text:?}: {got}")
                }
                (got, want) => panic!("{text:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn any_text_gives_a_clean_host_or_an_error(text in "(?s).{0,200}") {
            if let Ok(host) = first_host(&text) {
                proptest::prop_assert!(!host.is_empty());
                proptest::prop_assert!(!host.contains(char::is_whitespace));
                proptest::prop_assert!(!host.contains('#') && !host.contains('='));
            }
        }

        #[test]
        fn the_renderers_lines_give_their_first_endpoint(
            hosts in proptest::collection::vec("[a-z][a-z0-9-]{0,20}(\\.[a-z][a-z0-9-]{0,20}){0,3}", 1..6),
            slots in 1u32..64,
            comment in "(# [ -~]{0,30}\n)?",
        ) {
            let text: String = hosts.iter().map(|h| format!("{h} slots={slots}\n")).collect();
            let text = format!("{comment}{text}");
            proptest::prop_assert_eq!(first_host(&text), Ok(hosts[0].as_str()));
        }
    }
}
