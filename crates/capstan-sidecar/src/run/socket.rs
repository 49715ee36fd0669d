//! The Unix socket the sidecar serves on: created with mode 0660, a stale socket from a crashed
//! run replaced, anything else at the path left alone with a clear error.

use std::io;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

use thiserror::Error;
use tokio::net::UnixListener;

/// The socket's mode: the assistant's container shares the group; nobody else connects.
pub const SOCKET_MODE: u32 = 0o660;

/// Why the socket could not be bound.
#[derive(Debug, Error)]
pub enum SocketError {
    /// Something that is not a socket sits at the path; it is not deleted.
    #[error(
        "{path} exists and is not a socket; it was left alone: remove it or choose another \
         --socket path"
    )]
    NotASocket {
        /// The path.
        path: PathBuf,
    },
    /// A live server answers on the socket already.
    #[error("another process is serving on {path}; stop it or choose another --socket path")]
    InUse {
        /// The path.
        path: PathBuf,
    },
    /// The filesystem refused.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was attempted.
        action: &'static str,
        /// The path.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
}

fn io_error<'a>(
    action: &'static str,
    path: &'a Path,
) -> impl FnOnce(io::Error) -> SocketError + 'a {
    move |source| SocketError::Io {
        action,
        path: path.to_owned(),
        source,
    }
}

/// Binds `path`: replaces a stale socket (nothing answers on it), refuses a live one or a
/// non-socket, creates the parent directory, and sets mode 0660.
pub async fn bind(path: &Path) -> Result<UnixListener, SocketError> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            if tokio::net::UnixStream::connect(path).await.is_ok() {
                return Err(SocketError::InUse {
                    path: path.to_owned(),
                });
            }
            std::fs::remove_file(path).map_err(io_error("removing the stale socket", path))?;
        }
        Ok(_) => {
            return Err(SocketError::NotASocket {
                path: path.to_owned(),
            });
        }
        Err(error) if error.kind() == io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(SocketError::Io {
                action: "inspecting",
                path: path.to_owned(),
                source,
            });
        }
    }
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(io_error("creating the directory of", path))?;
    }
    // Bound under a name of this process's beside it, given its mode, then renamed into place:
    // the socket appears at `path` only with mode 0660 (a client, or a check, that found it
    // under the umask's mode first saw it before its chmod). A bound socket keeps its listener
    // when its file is renamed.
    let binding = path.with_file_name(format!(".{}.binding", std::process::id()));
    let _ = std::fs::remove_file(&binding);
    let listener = UnixListener::bind(&binding).map_err(io_error("binding", &binding))?;
    let placed = std::fs::set_permissions(&binding, std::fs::Permissions::from_mode(SOCKET_MODE))
        .map_err(io_error("setting the mode of", &binding))
        .and_then(|()| std::fs::rename(&binding, path).map_err(io_error("placing", path)));
    if let Err(error) = placed {
        let _ = std::fs::remove_file(&binding);
        return Err(error);
    }
    Ok(listener)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("capstan-socket-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir.join("composer.sock")
    }

    #[tokio::test]
    async fn the_socket_should_have_mode_0660_and_a_stale_one_be_replaced() {
        let path = temp("stale");
        let listener = bind(&path).await.unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o660);
        // A live socket is refused.
        assert!(matches!(bind(&path).await, Err(SocketError::InUse { .. })));
        // The "crashed" server left its socket behind: replaced.
        drop(listener);
        assert!(path.exists());
        let _again = bind(&path).await.unwrap();
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }

    #[tokio::test]
    async fn the_socket_should_serve_at_its_path_and_leave_no_other_name_behind() {
        let path = temp("renamed");
        let listener = bind(&path).await.unwrap();
        let (client, served) =
            tokio::join!(tokio::net::UnixStream::connect(&path), listener.accept());
        assert!(client.is_ok() && served.is_ok(), "{client:?} {served:?}");
        let dir = path.parent().unwrap();
        let names: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name())
            .collect();
        assert_eq!(names, ["composer.sock"]);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[tokio::test]
    async fn a_regular_file_at_the_path_should_be_left_alone() {
        let path = temp("file");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "precious").unwrap();
        let error = bind(&path).await.unwrap_err();
        assert!(
            error
                .to_string()
                .contains("is not a socket; it was left alone"),
            "{error}"
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "precious");
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }
}
