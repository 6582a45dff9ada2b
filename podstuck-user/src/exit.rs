//! The exit codes of both binaries, one scheme for all (docs/exit-codes.md):
//! a script tells "podstuck failed" from "I asked wrongly" from "the node
//! still has a critical problem" by the code alone.

/// The run did its job.
pub const SUCCESS: u8 = 0;
/// podstuck could not do its job: the node, the kernel, I/O, the cluster.
pub const FAILED: u8 = 1;
/// The user's input was wrong: arguments, a pod, a file, a refused path.
/// clap's own errors use it too.
pub const BAD_INPUT: u8 = 2;
/// `watch` ended with a critical finding still active.
pub const CRITICAL_ACTIVE: u8 = 3;
/// Ended by Ctrl-C where the command stops short of its job.
pub const INTERRUPTED: u8 = 130;

/// An error in what the user gave, said in full: the binaries exit
/// [`BAD_INPUT`] on it, where any other error is [`FAILED`].
#[derive(Debug)]
pub struct BadInput(pub String);

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadInput {}

/// The code an error ends a run with: [`BAD_INPUT`] if it (or what it was
/// caused by) is a [`BadInput`], else [`FAILED`].
pub fn code_of(error: &anyhow::Error) -> u8 {
    if error.chain().any(|e| e.is::<BadInput>()) {
        BAD_INPUT
    } else {
        FAILED
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context as _;

    #[test]
    fn bad_input_is_two_even_with_context_and_anything_else_one() {
        let bad: anyhow::Error = BadInput("--pod shop/web-0: no such pod".into()).into();
        assert_eq!(code_of(&bad), BAD_INPUT);
        let wrapped = Err::<(), _>(BadInput("x".into())).context("reading --from").unwrap_err();
        assert_eq!(code_of(&wrapped), BAD_INPUT);
        assert_eq!(code_of(&anyhow::anyhow!("cannot load the programs")), FAILED);
    }
}
