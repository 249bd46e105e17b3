//! `reply`: the handler's value is published to its type's stream.

use ruststream::prelude::*;
use ruststream::{Settle, Subscriber};

#[path = "../support.rs"]
mod support;

#[derive(Debug, Deserialize)]
struct Payment {
    id: u64,
    account: String,
}

#[derive(Debug, Serialize, Outgoing)]
#[outgoing(name = "payments.screened")]
struct Screened {
    payment_id: u64,
    suspicious: bool,
}

#[subscriber(RedisStream::new("payments").group("fraud").start_id(StreamStart::Beginning), reply)]
async fn screen_payment(payment: &Payment) -> Screened {
    Screened {
        payment_id: payment.id,
        suspicious: payment.account.is_empty(),
    }
}

#[derive(Debug, Serialize, Outgoing)]
#[outgoing(name = "echoes")]
struct Echo<T> {
    body: T,
}

// With the context, raw bytes in, a generic reply type out, options after `reply`.
#[subscriber(RedisStream::new("raw").group("echo"), reply, workers(2))]
async fn echo(bytes: &[u8], ctx: &mut Context<'_>) -> Echo<String> {
    Echo {
        body: format!("{}:{}", ctx.id(), String::from_utf8_lossy(bytes)),
    }
}

// An opaque reply type.
#[subscriber(RedisStream::new("raw").group("opaque"), reply)]
async fn opaque(_: Vec<u8>) -> impl Outgoing + Serialize {
    Echo { body: 1u8 }
}

fn main() {
    assert_eq!(
        support::deliver(&opaque, ruststream::Message::new(Vec::new())),
        Settle::Reply {
            stream: "echoes",
            payload: br#"{"body":1}"#.to_vec(),
        }
    );
    assert!(screen_payment.replies());
    assert!(echo.replies());
    assert_eq!(
        support::deliver(&screen_payment, support::json(r#"{"id":9,"account":""}"#)),
        Settle::Reply {
            stream: "payments.screened",
            payload: br#"{"payment_id":9,"suspicious":true}"#.to_vec(),
        }
    );
    assert_eq!(
        support::deliver(&echo, ruststream::Message::new(b"hi".to_vec())),
        Settle::Reply {
            stream: "echoes",
            payload: br#"{"body":"1-0:hi"}"#.to_vec(),
        }
    );
    support::assert_undecodable(
        support::deliver(&screen_payment, support::json("{}")),
        "Payment",
    );
}
