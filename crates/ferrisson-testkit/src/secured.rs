//! What protects a cluster or a Sentinel group: TLS only on every TCP port, and ACL users
//! with the default user switched off.

use std::fmt::Write as _;
use std::io;

use crate::server::Protection;
use crate::tls::path_arg;
use crate::{ClientAuth, TestCertificates};

/// An ACL user: a name and a password (Debug shows the name only).
#[derive(Clone)]
pub(crate) struct AclUser {
    pub(crate) name: String,
    pub(crate) password: String,
}

impl std::fmt::Debug for AclUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AclUser")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl AclUser {
    pub(crate) fn new(name: &str, password: &str) -> Self {
        Self {
            name: name.to_owned(),
            password: password.to_owned(),
        }
    }

    /// The `user` directive giving this user every key, channel and command; the
    /// directive that switches the default user off goes with it.
    fn directives(&self) -> [String; 2] {
        [
            format!("{} on >{} ~* &* +@all", self.name, self.password),
            "default off".to_owned(),
        ]
    }

    /// `user:password@` for a URL, each percent-encoded where a URL needs it.
    pub(crate) fn userinfo(&self) -> String {
        format!(
            "{}:{}@",
            percent_encode(&self.name),
            percent_encode(&self.password)
        )
    }
}

/// The protection a builder was asked for.
#[derive(Debug, Clone, Default)]
pub(crate) struct Secured {
    /// The ACL user of the data servers (masters and replicas, cluster nodes).
    pub(crate) user: Option<AclUser>,
    /// TLS only, and whether servers ask clients for a certificate.
    pub(crate) tls: Option<ClientAuth>,
}

impl Secured {
    /// Makes the certificates when TLS is asked for.
    pub(crate) fn certificates(&self) -> io::Result<Option<TestCertificates>> {
        self.tls.map(|_| TestCertificates::generate()).transpose()
    }

    /// How the kit reaches a server logging in as `user`.
    pub(crate) fn protection(&self, user: Option<&AclUser>) -> Protection {
        Protection {
            tls: self.tls.is_some(),
            auth: user.map(|user| (user.name.clone(), user.password.clone())),
        }
    }

    /// `redis-server` arguments for TLS on every link (clients, replication, the cluster
    /// bus when `cluster`), the server's and its outgoing links' certificates.
    pub(crate) fn tls_args(
        &self,
        certificates: Option<&TestCertificates>,
        cluster: bool,
    ) -> io::Result<Vec<String>> {
        let (Some(client_auth), Some(certificates)) = (self.tls, certificates) else {
            return Ok(Vec::new());
        };
        let mut args = vec![
            "--tls-cert-file".to_owned(),
            path_arg(&certificates.server_path())?,
            "--tls-key-file".to_owned(),
            path_arg(&certificates.server_key_path())?,
            // Outgoing links (replication, the cluster bus, a sentinel's) present the
            // client certificate: the server certificate is for server use only.
            "--tls-client-cert-file".to_owned(),
            path_arg(&certificates.client_path())?,
            "--tls-client-key-file".to_owned(),
            path_arg(&certificates.client_key_path())?,
            "--tls-ca-cert-file".to_owned(),
            path_arg(&certificates.ca_path())?,
            "--tls-auth-clients".to_owned(),
            match client_auth {
                ClientAuth::None => "no",
                ClientAuth::Required => "yes",
            }
            .to_owned(),
            "--tls-replication".to_owned(),
            "yes".to_owned(),
        ];
        if cluster {
            args.extend(["--tls-cluster".to_owned(), "yes".to_owned()]);
        }
        Ok(args)
    }

    /// `redis-server` arguments for the data servers' ACL user: the user, the default
    /// user off, and the credentials a replica gives its master.
    pub(crate) fn acl_args(&self) -> Vec<String> {
        let Some(user) = &self.user else {
            return Vec::new();
        };
        let mut args = Vec::new();
        // One argument per word: `redis-server` joins the words after `--user`.
        for directive in user.directives() {
            args.push("--user".to_owned());
            args.extend(directive.split(' ').map(str::to_owned));
        }
        args.extend([
            "--masteruser".to_owned(),
            user.name.clone(),
            "--masterauth".to_owned(),
            user.password.clone(),
        ]);
        args
    }

    /// `user` lines for a sentinel's configuration that protect the sentinel itself.
    pub(crate) fn sentinel_user_config(user: &AclUser) -> String {
        let [mine, default_off] = user.directives();
        format!("user {mine}\nuser {default_off}\n")
    }

    /// `redis-cli` options for TLS and the ACL user.
    pub(crate) fn redis_cli_args(
        &self,
        certificates: Option<&TestCertificates>,
    ) -> io::Result<Vec<String>> {
        let mut args = Vec::new();
        if let Some(certificates) = certificates {
            args.extend([
                "--tls".to_owned(),
                "--cacert".to_owned(),
                path_arg(&certificates.ca_path())?,
                "--cert".to_owned(),
                path_arg(&certificates.client_path())?,
                "--key".to_owned(),
                path_arg(&certificates.client_key_path())?,
            ]);
        }
        if let Some(user) = &self.user {
            args.extend([
                "--user".to_owned(),
                user.name.clone(),
                "--pass".to_owned(),
                user.password.clone(),
                "--no-auth-warning".to_owned(),
            ]);
        }
        Ok(args)
    }
}

/// `text` with every byte but letters, digits and `-._~` as `%XX`, for a URL's user info.
fn percent_encode(text: &str) -> String {
    let mut encoded = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            encoded.push(char::from(byte));
        } else {
            let _ = write!(encoded, "%{byte:02X}");
        }
    }
    encoded
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_info_is_percent_encoded() {
        let user = AclUser::new("locker", "p@ss:w/rd %");
        assert_eq!(user.userinfo(), "locker:p%40ss%3Aw%2Frd%20%25@");
        assert!(!format!("{user:?}").contains("p@ss"));
    }
}
