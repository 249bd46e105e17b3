use ruststream::prelude::*;

#[derive(Deserialize)]
struct Payment {}

#[subscriber(RedisStream::new("payments").group("a"))]
async fn no_payload() {}

#[subscriber(RedisStream::new("payments").group("b"))]
async fn too_many(_: &Payment, _: &mut Context<'_>, _: u32) {}

#[subscriber(RedisStream::new("payments").group("c"))]
async fn second_not_context(_: &Payment, _: &Payment) {}

#[subscriber(RedisStream::new("payments").group("d"))]
async fn context_first(_: &mut Context<'_>, _: &Payment) {}

#[subscriber(RedisStream::new("payments").group("e"))]
async fn shared_context(_: &Payment, _: &Context<'_>) {}

#[subscriber(RedisStream::new("payments").group("f"))]
async fn mutable_payload(_: &mut Payment) {}

#[subscriber(RedisStream::new("payments").group("g"))]
async fn text(_: &str) {}

fn main() {}
