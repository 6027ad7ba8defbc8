//! A service that leads in the background: request handlers (here a status
//! line printed every second; in axum or tonic, your handlers) hold a clone
//! of the elector and ask it who leads, while a background task runs the
//! leader-only part (a scheduler) and stops with the service.
//!
//! ```sh
//! cargo run -p tenure --example background_service -- sqlite://service.db
//! ```

use std::time::Duration;

use tenure::store::{self, StoreOptions};
use tenure::{Elector, State};

/// What every request handler gets (axum: `State<App>`; tonic: a field of
/// the service).
#[derive(Clone)]
pub struct App {
    elector: Elector,
}

impl App {
    /// A handler: leader-only requests check `is_leader()` (it costs an
    /// atomic load); the others can name the leader.
    pub fn status(&self) -> String {
        match &*self.elector.leadership().borrow() {
            State::Leading { term } => format!("leader (term {term})"),
            State::Following { leader, .. } => format!("follower; {leader} leads"),
            _ => "no leader".into(),
        }
    }
}

/// Starts campaigning for `scheduler` on `url` and runs the leader-only work
/// in the background until `stop` fires; the returned task ends once the
/// elector has shut down (lease released).
pub async fn start(
    url: &str,
    stop: impl std::future::Future + Send + 'static,
) -> tenure::Result<(App, tokio::task::JoinHandle<tenure::Result<()>>)> {
    let store = store::connect(url, &StoreOptions::default()).await?;
    let elector = Elector::builder(store).election("scheduler").build()?;
    let app = App {
        elector: elector.clone(),
    };
    let background = tokio::spawn(async move {
        elector
            .run_until(stop, |leadership| async move {
                let mut tick = tokio::time::interval(Duration::from_secs(1));
                loop {
                    tick.tick().await;
                    println!(
                        "scheduler: running due jobs under term {}",
                        leadership.term()
                    );
                }
            })
            .await
            .map(|_: Option<()>| ())
    });
    Ok((app, background))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "sqlite://service.db".into());
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (app, background) = start(&url, stop_rx).await?;
    // The "server": serves until Ctrl-C, then stops the background leader.
    let serve = async {
        loop {
            println!("status: {}", app.status());
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    };
    tokio::select! {
        _ = serve => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    let _ = stop_tx.send(());
    background.await??;
    println!("status after shutdown: {}", app.status());
    Ok(())
}
