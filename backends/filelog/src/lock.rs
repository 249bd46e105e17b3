//! The directory lock: one process owns a file log at a time.

use std::fs::{File, TryLockError};
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

use ruststream_core::{BrokerError, BrokerResult};

use crate::store::{io_error, private_file};

/// Holds the lock for as long as it lives (the operating system releases it
/// when the process ends, however it ends).
#[derive(Debug)]
pub(crate) struct DirLock {
    _file: File,
}

/// Who holds `dir`, as far as its lock file tells: `pid N`.
pub(crate) fn holder(dir: &Path) -> String {
    match std::fs::read_to_string(dir.join("LOCK")) {
        Ok(pid) if !pid.trim().is_empty() => format!("pid {}", pid.trim()),
        _ => "a process whose pid is not recorded".to_owned(),
    }
}

/// Takes the exclusive lock on `dir`, writing this process's pid into the
/// lock file; fails with [`BrokerError::InUse`] naming the holder's pid if
/// another process has it.
pub(crate) fn lock_dir(dir: &Path) -> BrokerResult<DirLock> {
    let path = dir.join("LOCK");
    let mut file = private_file()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| io_error(&path, e))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            return Err(BrokerError::InUse {
                path: dir.to_owned(),
                holder: holder(dir),
            });
        }
        Err(TryLockError::Error(e)) => return Err(io_error(&path, e)),
    }
    let pid = std::process::id().to_string();
    file.set_len(0)
        .and_then(|()| file.seek(SeekFrom::Start(0)))
        .and_then(|_| file.write_all(pid.as_bytes()))
        .and_then(|()| file.sync_all())
        .map_err(|e| io_error(&path, e))?;
    Ok(DirLock { _file: file })
}
