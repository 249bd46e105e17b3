//! `#[derive(Outgoing)]` on structs, enums and generic types.

use std::borrow::Cow;
use std::fmt::Debug;

use ruststream::prelude::*;

#[derive(Serialize, Outgoing)]
#[outgoing(name = "payments")]
struct Payment {
    id: u64,
}

#[derive(Serialize, Outgoing)]
#[outgoing(name = "events")]
enum Event {
    Opened,
    Closed { at: u64 },
}

#[derive(Serialize, Outgoing)]
#[outgoing(name = "envelopes")]
struct Envelope<T: Serialize, const N: usize> {
    items: Vec<T>,
}

#[derive(Serialize, Outgoing)]
#[outgoing(name = "notes")]
struct Note<'a, T>
where
    T: Debug + Clone,
{
    text: Cow<'a, str>,
    tag: T,
}

// Other attributes and derives beside it, a raw string name.
#[derive(Debug, Clone, Serialize, Outgoing)]
#[serde(rename_all = "camelCase")]
#[outgoing(name = r"audit.log")]
pub struct AuditLine {
    line_no: u64,
}

fn stream<T: Outgoing + ?Sized>() -> &'static str {
    T::STREAM
}

fn main() {
    assert_eq!(Payment::STREAM, "payments");
    assert_eq!(stream::<Event>(), "events");
    assert_eq!(stream::<Envelope<u8, 3>>(), "envelopes");
    assert_eq!(stream::<Note<'static, u8>>(), "notes");
    assert_eq!(AuditLine::STREAM, "audit.log");
    let _ = (Payment { id: 1 }.id, Event::Opened, Event::Closed { at: 1 });
    let _ = Envelope::<u8, 3> {
        items: vec![1, 2, 3],
    }
    .items;
    let _ = Note {
        text: "x".into(),
        tag: 1u8,
    }
    .text;
    let _ = AuditLine { line_no: 1 }.line_no;
}
