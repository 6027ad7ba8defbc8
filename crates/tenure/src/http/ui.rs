//! `GET /ui`: the dashboard page (`ui/index.html`), its first paint
//! rendered here. The page arrives with a table of the elections as the
//! store has them at the request (leader, term, lease left, members), so a
//! browser without scripts, a headless screenshot or a page-load-based
//! probe sees the state at once; the page's scripts then replace it with
//! the live view.

use axum::response::Html;

use super::elections::{bounded, lock, read_all};
use super::view::ElectionView;
use super::State;
use crate::store::identity_of;

/// The page, compiled in: one self-contained file (no CDN, nothing fetched
/// but this API).
const PAGE: &str = include_str!("ui/index.html");

/// What the page holds until its scripts have read the API; the first
/// paint takes its place.
const PLACEHOLDER: &str = r#"<div class="empty">loading…</div>"#;

/// `GET /ui`.
pub(crate) async fn ui(state: State) -> Html<String> {
    let first = match bounded(&state, read_all(&state, 0)).await {
        Ok(views) => {
            lock(&state).all = Some(views.clone());
            first_paint(&views, None)
        }
        Err(reason) => match lock(&state).all.clone() {
            Some(views) => first_paint(&views, Some(&reason)),
            None => format!(
                r#"<div class="empty">the store cannot be read: {}</div>"#,
                escape(&reason)
            ),
        },
    };
    Html(PAGE.replacen(PLACEHOLDER, &first, 1))
}

/// The elections as one table, newest state first in no particular order
/// but the store's (namespace, election); `stale`: why this is the last
/// known state rather than the store's now.
fn first_paint(views: &[ElectionView], stale: Option<&str>) -> String {
    if views.is_empty() {
        return r#"<div class="empty">no elections in this store yet</div>"#.into();
    }
    let mut html =
        String::from(r#"<section class="card first-paint" style="grid-column: 1 / -1">"#);
    if let Some(reason) = stale {
        html += &format!(
            r#"<p class="badge bad">stale: {}; the last known state</p>"#,
            escape(reason)
        );
    }
    html += "<table><thead><tr><th>election</th><th>leader</th><th>term</th>\
             <th>lease left</th><th>members</th></tr></thead><tbody>";
    for v in views {
        let leader = match &v.leader {
            Some(holder) => format!(
                r#"<span class="role-leader">{}</span>"#,
                escape(identity_of(holder))
            ),
            None => r#"<span class="role-lapsed">no leader</span>"#.into(),
        };
        let left = match v.leader {
            Some(_) => format!("{:.1} s", v.lease_left_ms / 1000.0),
            None => "-".into(),
        };
        let live = v.members.iter().filter(|m| m.live).count();
        html += &format!(
            "<tr><td>{}/{}</td><td>{leader}</td><td>{}</td><td>{left}</td><td>{live}</td></tr>",
            escape(&v.namespace),
            escape(&v.election),
            v.term,
        );
    }
    html += "</tbody></table></section>";
    html
}

/// `text` for HTML text and quoted attribute values. Written here rather
/// than taken from a crate: five characters, and the page has no other
/// server-side HTML.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_has_the_placeholder_the_first_paint_replaces() {
        assert_eq!(PAGE.matches(PLACEHOLDER).count(), 1);
    }

    #[test]
    fn names_are_escaped() {
        assert_eq!(
            escape(r#"<img src=x onerror="a('b')">&"#),
            "&lt;img src=x onerror=&quot;a(&#39;b&#39;)&quot;&gt;&amp;"
        );
    }
}
