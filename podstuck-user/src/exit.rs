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

/// A run stopped short of its job by a signal (Ctrl-C, SIGTERM), which it
/// names: the binaries exit [`INTERRUPTED`] on it.
#[derive(Debug)]
pub struct Interrupted(pub &'static str);

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "stopped by {}", self.0)
    }
}

impl std::error::Error for Interrupted {}

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

/// Whether an error is of a kind that ends a run as a refusal of what was
/// asked ([`BAD_INPUT`]), not a failure: the errors of modules above this
/// floor that are so (another podstuck holds the node, the address to
/// listen on is taken, the node cannot be traced) are named by the binary
/// that knows them, as `refused_as::<AlreadyTracing>`.
pub type Refusal = fn(&(dyn std::error::Error + 'static)) -> bool;

/// A [`Refusal`] for errors of type `T`.
pub fn refused_as<T: std::error::Error + 'static>(error: &(dyn std::error::Error + 'static)) -> bool {
    error.is::<T>()
}

/// The code an error ends a run with: [`INTERRUPTED`] if it (or what it
/// was caused by) is an [`Interrupted`], [`BAD_INPUT`] if it is a
/// [`BadInput`] or one of `refusals`, else [`FAILED`].
pub fn code_of(error: &anyhow::Error, refusals: &[Refusal]) -> u8 {
    let refused = |e: &(dyn std::error::Error + 'static)| e.is::<BadInput>() || refusals.iter().any(|r| r(e));
    if error.chain().any(|e| e.is::<Interrupted>()) {
        INTERRUPTED
    } else if error.chain().any(refused) {
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
        assert_eq!(code_of(&bad, &[]), BAD_INPUT);
        let wrapped = Err::<(), _>(BadInput("x".into())).context("reading --from").unwrap_err();
        assert_eq!(code_of(&wrapped, &[]), BAD_INPUT);
        assert_eq!(code_of(&anyhow::anyhow!("cannot load the programs"), &[]), FAILED);
        assert_eq!(code_of(&Interrupted("SIGINT").into(), &[]), INTERRUPTED);
    }

    /// An error of a kind the binary names a refusal is two, and only it.
    #[test]
    fn a_refusal_of_a_kind_named_is_two() {
        #[derive(Debug)]
        struct Taken;
        impl std::fmt::Display for Taken {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("the address is taken")
            }
        }
        impl std::error::Error for Taken {}
        let taken: anyhow::Error = Taken.into();
        assert_eq!(code_of(&taken, &[refused_as::<Taken>]), BAD_INPUT);
        assert_eq!(code_of(&taken.context("listening"), &[refused_as::<Taken>]), BAD_INPUT);
        assert_eq!(code_of(&anyhow::Error::from(Taken), &[]), FAILED);
    }
}
