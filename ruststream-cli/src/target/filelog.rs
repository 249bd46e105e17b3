//! Opening a file-log directory: for commands that only read, always as a
//! read-only view (no lock: a service starting meanwhile must not find the
//! log in use); for changes, with its lock, which a running service holds
//! (changes to a held directory go through that service's admin
//! endpoint).

use std::path::Path;

use ruststream::{BrokerError, FileLogBroker};

use super::Access;
use crate::error::{CliError, CliResult};

/// Opens the file log in `dir` for `access`.
///
/// A directory that does not exist, or holds no file log, is
/// [`CliError::NotFound`] (the tool never creates one). A read opens it
/// read-only ([`open_read_only`]), held or not. A write takes the lock; when
/// a running service holds the directory it is [`CliError::Refused`],
/// naming the holder's pid and `--admin`.
pub fn open_file_log(dir: &Path, access: Access) -> CliResult<FileLogBroker> {
    check_is_file_log(dir)?;
    if access == Access::Read {
        return open_read_only(dir);
    }
    match FileLogBroker::open(dir) {
        Ok(log) => Ok(log),
        Err(BrokerError::InUse { holder, .. }) => Err(CliError::Refused(format!(
            "the file log {} is held by a running service ({holder}): it takes no changes \
             from another process; use --admin with that service's admin endpoint",
            dir.display()
        ))),
        Err(other) => Err(other.into()),
    }
}

/// The read-only view of a file log: its state as of its holder's last
/// sync (all of it, when nobody holds it), taking no lock and writing
/// nothing (`FileLogBroker::open_read_only`). Its write calls fail.
pub fn open_read_only(dir: &Path) -> CliResult<FileLogBroker> {
    FileLogBroker::open_read_only(dir).map_err(CliError::from)
}

/// Refuses a path that is not a file-log directory, so that a typo never
/// creates one.
fn check_is_file_log(dir: &Path) -> CliResult<()> {
    if !dir.is_dir() {
        return Err(CliError::NotFound(format!(
            "no file log at {}: the directory does not exist",
            dir.display()
        )));
    }
    let marks = ["LOCK", "streams", "state"];
    if !marks.iter().any(|m| dir.join(m).exists()) {
        return Err(CliError::NotFound(format!(
            "{} is not a file log (it has no LOCK, streams/ or state/)",
            dir.display()
        )));
    }
    Ok(())
}
