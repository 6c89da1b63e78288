//! Where a rank finds its job secret (docs/security.md).
//!
//! In order: `SHOAL_SECRET` (set by `shoal run` to a fresh random value per
//! job, or by the user for any other launcher), the file named by
//! `SHOAL_SECRET_FILE`, else the per-user file `$XDG_CONFIG_HOME/shoal/secret`
//! (default `~/.config/shoal/secret`), created with a random secret and mode
//! 0600 on first use. The per-user file lets jobs started by torchrun, srun or
//! mpirun authenticate without configuration on one host or with a shared
//! home directory; other users' processes cannot read it.

use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::auth::{random_bytes, to_hex, Key};
use crate::small_file::read_text;

/// The shortest secret accepted: shorter ones could be guessed offline from
/// one recorded handshake.
pub const MIN_SECRET_CHARS: usize = 16;

/// The largest secret file read: a secret is a line, and a bound keeps a
/// mistaken path (`/dev/zero`) from taking the process's memory.
pub const MAX_SECRET_FILE_BYTES: u64 = 64 << 10;

/// Where the secret came from, for error messages ("which secret was refused").
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SecretSource {
    Env,
    File(PathBuf),
    /// Drawn for a process that is a whole job by itself.
    Ephemeral,
}

impl std::fmt::Display for SecretSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SecretSource::Env => f.write_str("SHOAL_SECRET"),
            SecretSource::File(p) => write!(f, "the secret file {}", p.display()),
            SecretSource::Ephemeral => f.write_str("a secret drawn for this single process"),
        }
    }
}

/// This job's secret and where it was found.
#[derive(Clone, Debug)]
pub struct JobSecret {
    pub key: Key,
    pub source: SecretSource,
}

impl JobSecret {
    /// Loads the secret as described in the module documentation.
    pub fn load(env: &dyn Fn(&str) -> Option<String>) -> Result<JobSecret, SecretError> {
        if let Some(s) = env("SHOAL_SECRET").filter(|s| !s.is_empty()) {
            return Ok(JobSecret {
                key: key_of(&s, "job", "SHOAL_SECRET")?,
                source: SecretSource::Env,
            });
        }
        let path = match env("SHOAL_SECRET_FILE").filter(|s| !s.is_empty()) {
            Some(p) => PathBuf::from(p),
            None => default_secret_file(env)?,
        };
        let text = read_or_create(&path)?;
        Ok(JobSecret {
            key: key_of(text.trim(), "job", &path.display().to_string())?,
            source: SecretSource::File(path),
        })
    }

    /// A fresh secret that is never written down, for a process that is the
    /// whole job and meets nobody: nothing else needs to hold it.
    pub fn ephemeral() -> Result<JobSecret, SecretError> {
        Ok(JobSecret {
            key: Key::random().map_err(SecretError::NoRandom)?,
            source: SecretSource::Ephemeral,
        })
    }
}

/// Why no usable job (or switch) secret was found.
#[derive(Debug)]
pub enum SecretError {
    /// A secret too short to resist an offline guess; `which` is "job" or
    /// "switch", `what` where it came from.
    TooShort {
        which: String,
        what: String,
        chars: usize,
    },
    /// No secret was given and there is no home directory for the per-user file.
    NoHome,
    /// The kernel's random generator failed.
    NoRandom(io::Error),
    Unreadable {
        path: PathBuf,
        source: io::Error,
    },
    Uncreatable {
        path: PathBuf,
        source: io::Error,
    },
    /// The secret file belongs to another user.
    NotOurs {
        path: PathBuf,
        owner: u32,
        uid: u32,
    },
    /// Other users may read or write the secret file.
    OpenToOthers {
        path: PathBuf,
        mode: u32,
    },
}

impl fmt::Display for SecretError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretError::TooShort { which, what, chars } => write!(
                f,
                "the {which} secret in {what} is {chars} characters; at least {MIN_SECRET_CHARS} \
                 are needed (`shoal secret` prints a good one)"
            ),
            SecretError::NoHome => f.write_str(
                "no job secret: set SHOAL_SECRET (the same on every rank) or SHOAL_SECRET_FILE; \
                 HOME is not set, so the per-user secret file cannot be used",
            ),
            SecretError::NoRandom(e) => write!(f, "cannot draw a random job secret: {e}"),
            SecretError::Unreadable { path, source } => write!(
                f,
                "cannot read the job secret file {}: {source}",
                path.display()
            ),
            SecretError::Uncreatable { path, source } => write!(
                f,
                "cannot create the job secret file {}: {source}; set SHOAL_SECRET instead",
                path.display()
            ),
            SecretError::NotOurs { path, owner, uid } => write!(
                f,
                "the job secret file {} belongs to uid {owner}, not to this user ({uid}); \
                 refusing it",
                path.display()
            ),
            SecretError::OpenToOthers { path, mode } => write!(
                f,
                "the job secret file {0} is readable or writable by other users (mode {mode:o}); \
                 run `chmod 600 {0}`",
                path.display()
            ),
        }
    }
}

impl std::error::Error for SecretError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SecretError::NoRandom(e)
            | SecretError::Unreadable { source: e, .. }
            | SecretError::Uncreatable { source: e, .. } => Some(e),
            _ => None,
        }
    }
}

/// For callers that report the error as text (the switch's secret loader).
impl From<SecretError> for String {
    fn from(e: SecretError) -> String {
        e.to_string()
    }
}

/// A new random secret, as `shoal run` hands to its ranks.
pub fn generate() -> Result<String, SecretError> {
    random_bytes::<32>()
        .map(|b| to_hex(&b))
        .map_err(SecretError::NoRandom)
}

/// The key of a secret string (`which`: "job" or "switch"), refusing
/// secrets too short to resist an offline guess; `what` says where it came from.
pub fn key_of(secret: &str, which: &str, what: &str) -> Result<Key, SecretError> {
    let chars = secret.chars().count();
    if chars < MIN_SECRET_CHARS {
        return Err(SecretError::TooShort {
            which: which.to_string(),
            what: what.to_string(),
            chars,
        });
    }
    Ok(Key::from_material(secret.as_bytes()))
}

fn default_secret_file(env: &dyn Fn(&str) -> Option<String>) -> Result<PathBuf, SecretError> {
    let config = env("XDG_CONFIG_HOME")
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            env("HOME")
                .filter(|s| !s.is_empty())
                .map(|h| Path::new(&h).join(".config"))
        })
        .ok_or(SecretError::NoHome)?;
    Ok(config.join("shoal").join("secret"))
}

/// Reads the secret file, or creates it (mode 0600, atomically) if it does
/// not exist. A file that other users could read or write is refused.
fn read_or_create(path: &Path) -> Result<String, SecretError> {
    let unreadable = |source| SecretError::Unreadable {
        path: path.to_path_buf(),
        source,
    };
    match fs::metadata(path) {
        Ok(meta) => {
            check_private(path, &meta)?;
            read_text(path, MAX_SECRET_FILE_BYTES).map_err(unreadable)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => create(path),
        Err(e) => Err(unreadable(e)),
    }
}

fn check_private(path: &Path, meta: &fs::Metadata) -> Result<(), SecretError> {
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    if meta.uid() != uid {
        return Err(SecretError::NotOurs {
            path: path.to_path_buf(),
            owner: meta.uid(),
            uid,
        });
    }
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(SecretError::OpenToOthers {
            path: path.to_path_buf(),
            mode: meta.permissions().mode() & 0o777,
        });
    }
    Ok(())
}

/// Writes a fresh secret to a private temporary file and links it into
/// place, so concurrent first uses agree on one secret.
fn create(path: &Path) -> Result<String, SecretError> {
    let failed = |source| SecretError::Uncreatable {
        path: path.to_path_buf(),
        source,
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(failed)?;
    let secret = generate()?;
    let tmp = dir.join(format!(".secret.{}", std::process::id()));
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(failed)?;
    let written = f
        .write_all(format!("{secret}\n").as_bytes())
        .and_then(|_| f.sync_all());
    // hard_link fails if another process created the file first: then theirs wins.
    let linked = written.and_then(|_| fs::hard_link(&tmp, path));
    let _ = fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(secret),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => read_or_create(path),
        Err(e) => Err(failed(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, String)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        move |k| map.get(k).cloned()
    }

    fn temp_home(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("shoal-secret-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn env_secret_wins_and_short_ones_are_refused() {
        let env = env_of(&[("SHOAL_SECRET", "0123456789abcdef".into())]);
        let s = JobSecret::load(&env).unwrap();
        assert_eq!(s.source, SecretSource::Env);
        assert_eq!(s.key, Key::from_material(b"0123456789abcdef"));
        let err = JobSecret::load(&env_of(&[("SHOAL_SECRET", "short".into())]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("SHOAL_SECRET") && err.contains("16"), "{err}");
    }

    #[test]
    fn per_user_file_is_created_private_and_reused() {
        let home = temp_home("create");
        let env = env_of(&[("HOME", home.display().to_string())]);
        let first = JobSecret::load(&env).unwrap();
        let path = home.join(".config/shoal/secret");
        assert_eq!(first.source, SecretSource::File(path.clone()));
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(JobSecret::load(&env).unwrap().key, first.key);
        fs::remove_dir_all(home).unwrap();
    }

    #[test]
    fn readable_secret_file_is_refused() {
        let home = temp_home("mode");
        let path = home.join("s");
        fs::write(&path, "a-long-enough-secret-value").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        let env = env_of(&[("SHOAL_SECRET_FILE", path.display().to_string())]);
        let err = JobSecret::load(&env).unwrap_err().to_string();
        assert!(err.contains("chmod 600"), "{err}");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        assert!(JobSecret::load(&env).is_ok());
        fs::remove_dir_all(home).unwrap();
    }

    #[test]
    fn a_private_fifo_is_refused_without_blocking() {
        let home = temp_home("fifo");
        let path = home.join("s");
        let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: c is a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let env = env_of(&[("SHOAL_SECRET_FILE", path.display().to_string())]);
        let err = JobSecret::load(&env).unwrap_err().to_string();
        assert!(err.contains("a FIFO, not a regular file"), "{err}");
        fs::remove_dir_all(home).unwrap();
    }

    #[test]
    fn no_home_and_no_secret_names_the_variables() {
        let err = JobSecret::load(&env_of(&[])).unwrap_err().to_string();
        assert!(err.contains("SHOAL_SECRET"), "{err}");
    }
}
