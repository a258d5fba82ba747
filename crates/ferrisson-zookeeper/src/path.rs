//! Primitive names and the ZooKeeper paths they live at.

use ferrisson_core::{Error, Result};

/// Longest name a primitive takes, in bytes.
pub const MAX_NAME_LEN: usize = 1024;

/// Where the primitives whose names are not paths live, one folder per kind.
pub(crate) const LOCKS_ROOT: &str = "/ferrisson/locks";
/// See [`LOCKS_ROOT`].
pub(crate) const ELECTIONS_ROOT: &str = "/ferrisson/elections";
/// See [`LOCKS_ROOT`].
pub(crate) const RWLOCKS_ROOT: &str = "/ferrisson/rwlocks";
/// See [`LOCKS_ROOT`].
pub(crate) const SEMAPHORES_ROOT: &str = "/ferrisson/semaphores";
/// See [`LOCKS_ROOT`].
pub(crate) const LATCHES_ROOT: &str = "/ferrisson/latches";
/// See [`LOCKS_ROOT`].
pub(crate) const BARRIERS_ROOT: &str = "/ferrisson/barriers";

/// The path of the primitive `name` of a kind whose folder is `root`: a name that starts
/// with `/` is the path itself (Curator's lock path, to share a lock with a Java
/// service); any other name lives under `root` (`orders:42` → `/ferrisson/locks/orders:42`).
pub(crate) fn path_of(root: &str, name: &str) -> Result<String> {
    if name.is_empty() {
        return Err(Error::invalid("name must not be empty"));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(Error::invalid(format!(
            "name must be at most {MAX_NAME_LEN} bytes, got {}",
            name.len()
        )));
    }
    let path = if name.starts_with('/') {
        name.to_owned()
    } else {
        format!("{root}/{name}")
    };
    validate_path(&path)?;
    Ok(path)
}

/// Checks an absolute ZooKeeper path: no empty, `.` or `..` segment, no trailing `/`,
/// none of the characters ZooKeeper refuses, not the root and not under `/zookeeper`.
pub(crate) fn validate_path(path: &str) -> Result<()> {
    let Some(relative) = path.strip_prefix('/') else {
        return Err(Error::invalid("a ZooKeeper path starts with /"));
    };
    if relative.is_empty() {
        return Err(Error::invalid("the root / cannot be a lock's path"));
    }
    for segment in relative.split('/') {
        if segment.is_empty() {
            return Err(Error::invalid(
                "a ZooKeeper path has no empty segment (no // and no trailing /)",
            ));
        }
        if segment == "." || segment == ".." {
            return Err(Error::invalid("a ZooKeeper path has no . or .. segment"));
        }
    }
    if let Some(c) = path.chars().find(|&c| refused(c)) {
        return Err(Error::invalid(format!(
            "ZooKeeper paths cannot contain {:?}",
            c.escape_debug().to_string()
        )));
    }
    if relative == "zookeeper" || relative.starts_with("zookeeper/") {
        return Err(Error::invalid("/zookeeper is ZooKeeper's own tree"));
    }
    Ok(())
}

/// The characters ZooKeeper's `PathUtils.validatePath` refuses.
fn refused(c: char) -> bool {
    matches!(c,
        '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' | '\u{f000}'..='\u{f8ff}' | '\u{fff0}'..='\u{ffff}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_to_paths() {
        assert_eq!(
            path_of(LOCKS_ROOT, "orders:42").ok().as_deref(),
            Some("/ferrisson/locks/orders:42")
        );
        assert_eq!(
            path_of(LOCKS_ROOT, "/curator/locks/a").ok().as_deref(),
            Some("/curator/locks/a")
        );
        for bad in [
            "",
            "/",
            "a//b",
            "a/",
            "/zookeeper/x",
            "a/../b",
            "a\u{0}b",
            "a\nb",
        ] {
            assert!(path_of(LOCKS_ROOT, bad).is_err(), "{bad:?}");
        }
        assert!(path_of(LOCKS_ROOT, &"x".repeat(MAX_NAME_LEN + 1)).is_err());
    }
}
