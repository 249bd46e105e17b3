use ruststream::prelude::*;

#[derive(Outgoing)]
#[outgoing(name = "")]
struct Empty;

#[derive(Outgoing)]
#[outgoing(name = payments)]
struct NotAString;

#[derive(Outgoing)]
#[outgoing(name = "a", name = "b")]
struct Twice;

#[derive(Outgoing)]
#[outgoing(name = "a", partitions = 4)]
struct UnknownKey;

#[derive(Outgoing)]
#[outgoing]
struct NoArguments;

fn main() {}
