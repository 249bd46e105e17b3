//! A payload type that borrows through an elided lifetime (`Note<'_>`)
//! cannot be told from the tokens from one that decodes into owned values
//! for any lifetime (fields of type `Cow<'a, str>`), which works: the
//! macro lets it through, and rustc reports the borrowing one.

use std::borrow::Cow;

use ruststream::prelude::*;

include!("../app_including.rs");

#[derive(Debug, Deserialize)]
struct Note<'a> {
    text: &'a str,
}

#[derive(Debug, Deserialize)]
struct Memo<'a> {
    text: Cow<'a, str>,
}

#[subscriber(RedisStream::new("notes").group("a"))]
async fn borrowed_fields(note: Note<'_>) {
    let _ = note.text;
}

#[subscriber(RedisStream::new("memos").group("a"))]
async fn owned_fields(memo: Memo<'_>) {
    let _ = memo.text;
}

app_including!(borrowed_fields, owned_fields);
