//! The small key=value file a cluster directory carries so that a later
//! process (`pgharness stop`, `pgharness psql`, scripts) can find the cluster.

use std::fs;
use std::path::{Path, PathBuf};

use crate::error::{HarnessError, IoContext};
use crate::{HbaAuth, PgVersion};

pub(crate) const FILE: &str = "pgharness.meta";

#[derive(Debug, Clone)]
pub(crate) struct Meta {
    pub port: u16,
    pub version: PgVersion,
    pub bin_dir: PathBuf,
    pub auth: HbaAuth,
    pub ssl: bool,
}

impl Meta {
    pub(crate) fn write(&self, dir: &Path) -> Result<(), HarnessError> {
        let text = format!(
            "port={}\nversion={}\nbin_dir={}\nauth={}\nssl={}\n",
            self.port,
            self.version,
            self.bin_dir.display(),
            self.auth,
            self.ssl
        );
        let path = dir.join(FILE);
        fs::write(&path, text).ctx(|| format!("write {}", path.display()))
    }

    pub(crate) fn read(dir: &Path) -> Result<Meta, HarnessError> {
        let path = dir.join(FILE);
        let text = fs::read_to_string(&path).map_err(|e| HarnessError::Metadata {
            path: path.clone(),
            reason: format!("{e} (is this a pgharness cluster directory?)"),
        })?;
        let bad = |reason: String| HarnessError::Metadata { path: path.clone(), reason };
        let get = |key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(key).and_then(|rest| rest.strip_prefix('=')))
                .ok_or_else(|| bad(format!("missing `{key}`")))
        };
        Ok(Meta {
            port: get("port")?.parse().map_err(|e| bad(format!("port: {e}")))?,
            version: get("version")?.parse()?,
            bin_dir: PathBuf::from(get("bin_dir")?),
            auth: get("auth")?.parse()?,
            ssl: get("ssl")? == "true",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let dir = tempfile::tempdir().expect("tempdir");
        let meta = Meta {
            port: 5555,
            version: PgVersion::V18,
            bin_dir: "/x/bin".into(),
            auth: HbaAuth::Md5,
            ssl: true,
        };
        meta.write(dir.path()).expect("write");
        let back = Meta::read(dir.path()).expect("read");
        assert_eq!(
            (back.port, back.version, back.auth, back.ssl),
            (5555, PgVersion::V18, HbaAuth::Md5, true)
        );
        assert_eq!(back.bin_dir, PathBuf::from("/x/bin"));
        assert!(Meta::read(&dir.path().join("nope")).is_err());
    }
}
