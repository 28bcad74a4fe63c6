//! Bad input to the attributes is a compile error at the mistake, saying what to write
//! instead: unknown options, bad values, a function that is not `async`, arguments,
//! generics, a second `#[test]`, something that is not a function. Each case is a file in
//! `tests/ui/` with the compiler's output beside it (`TRYBUILD=overwrite` rewrites them).

#[test]
fn bad_input_is_a_compile_error_at_the_mistake() {
    trybuild::TestCases::new().compile_fail("tests/ui/*.rs");
}
