//! Compile-time behaviour of the macros: `ui/pass` holds every supported
//! shape (each is built and run), `ui/fail` the mistakes users make, each
//! with the exact error it gets (`.stderr`). The newer fail cases put the
//! mistake in an app that uses it (`app_including!(x)`, from
//! `ui/app_including.rs`, and `x::handler(..)`), so that an error cascading
//! past the macro's own would show there. After an
//! intended change of a message, regenerate with `TRYBUILD=overwrite cargo
//! test -p ruststream --test ui` and review the diff.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass/*.rs");
    cases.compile_fail("tests/ui/fail/*.rs");
}
