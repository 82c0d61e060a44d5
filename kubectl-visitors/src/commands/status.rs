//! `status [APP]`.

use crate::cli::Output;
use crate::client::Session;
use crate::error::Error;
use crate::render::{self, Screen};
use crate::{output, snapshot, view};

pub async fn run(
    session: &Session,
    app: Option<&str>,
    all_namespaces: bool,
    format: Output,
    screen: Screen,
) -> Result<(), Error> {
    let now = super::now();
    match app {
        Some(app) => {
            let snapshot = snapshot::read_app(session, app).await?;
            let status = view::app_status(&snapshot, now);
            output::print(format, &status, || render::app_status(&status, &screen))
        }
        None => {
            let snapshot = snapshot::read_many(session, all_namespaces).await?;
            let lines = view::app_lines(&snapshot, now);
            output::print(format, &lines, || render::app_lines(&lines, all_namespaces, now, &screen))
        }
    }
}
