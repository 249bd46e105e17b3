//! Starting an app with its admin endpoint, for tests that call the
//! endpoint over HTTP.

use ruststream::{Running, RustStream, StartError};

/// Starts `app` serving its admin endpoint on a free local port
/// (`127.0.0.1:0`), its write routes behind `token` if one is given; the
/// running app and the endpoint's base URL (`http://127.0.0.1:PORT`).
///
/// # Errors
///
/// What [`RustStream::start`] returns.
///
/// # Panics
///
/// If the started app serves no admin endpoint (it always does, having
/// been given an address).
pub async fn serve_admin(
    app: RustStream,
    token: Option<&str>,
) -> Result<(Running, String), StartError> {
    let mut app = app.admin(([127, 0, 0, 1], 0).into());
    if let Some(token) = token {
        app = app.admin_token(token);
    }
    let running = app.start().await?;
    let addr = running
        .admin_addr()
        .expect("an app started with admin(addr) serves the endpoint");
    Ok((running, format!("http://{addr}")))
}
