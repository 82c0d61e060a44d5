//! `runs APP`.

use crate::cli::Output;
use crate::client::Session;
use crate::error::Error;
use crate::render::{self, Screen};
use crate::{output, snapshot, view};

pub async fn run(session: &Session, app: &str, format: Output, screen: Screen) -> Result<(), Error> {
    let now = super::now();
    let snapshot = snapshot::read_app(session, app).await?;
    let runs = view::runs(&snapshot);
    output::print(format, &runs, || render::runs(&runs, now, &screen))
}
