use ruststream::prelude::*;

#[derive(Serialize, Outgoing)]
struct Payment {
    id: u64,
}

#[derive(Serialize, Outgoing)]
#[outgoing(stream = "refunds")]
struct Refund {
    id: u64,
}

fn main() {}
