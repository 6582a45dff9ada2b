//! The shape of a node question in a record: one variant per question of
//! the table (`inspect::questions`), its arguments and answer in their
//! wire shapes, made by the macro below; and the key a question is found
//! by, the same for a question read and one asked.

use serde::{Deserialize, Serialize};

use super::answers::{Recorded, WireMount, WireProbe};
use super::Bytes;
use crate::inspect::questions::named::*;
use crate::inspect::questions::node_questions;
use crate::record::question::Question;

/// A question alone, method and arguments (in their wire shapes), as a key
/// to find answers to it by. Only compared within one run of one podstuck.
pub fn question_key(method: &str, arguments: &impl Serialize) -> String {
    match serde_json::to_string(arguments) {
        // No arguments: the method alone.
        Ok(none) if none == "null" => method.to_string(),
        Ok(arguments) => format!("{method} {arguments}"),
        Err(_) => method.to_string(),
    }
}

/// Whether an argument older records lack is its default: left out then,
/// and read back as it.
fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

macro_rules! wire_question_of {
    ($(
        $(#[$doc:meta])*
        fn $method:ident($($arg:ident: $ty:ty => $owned:ty $(= $older:expr)?),*) -> $answer:ty as $variant:ident;
    )*) => {
        /// One question a detector asked of the node, and its answer. A missing
        /// `answer` means: the same as the last answer to the same question (see
        /// `LastAnswers`; a node's mount table is asked about every half second and
        /// seldom changes).
        #[derive(Debug, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum WireQuestion {
            $(
                $variant {
                    $(
                        $(
                            #[doc = concat!("Absent from older records: read as ", stringify!($older), "; left out when it is that.")]
                            #[serde(default, skip_serializing_if = "is_default")]
                        )?
                        $arg: <$owned as Recorded>::Wire,
                    )*
                    #[serde(default, skip_serializing_if = "Option::is_none")]
                    answer: Option<<$answer as Recorded>::Wire>,
                    /// The kind of an answer that could not be read ("timed-out"),
                    /// beside the answer's words; absent from older records.
                    #[serde(default, skip_serializing_if = "Option::is_none")]
                    error_kind: Option<String>,
                },
            )*
            /// Records made before podstuck read a caller's mount namespace
            /// through a process living in it asked by pid: read, and left out
            /// (a replay says the namespace is not in the record).
            MountsOfProcess {
                pid: u32,
                #[serde(default, skip_serializing_if = "Option::is_none")]
                answer: Option<WireProbe<Vec<WireMount>>>,
            },
            /// Not a question: the detectors telling the node to stay away
            /// from a hung mount.
            Avoid { path: Bytes<'static> },
        }

        impl Question {
            /// The question alone, method and arguments: what an answer is
            /// found by, written and read.
            pub fn key(&self) -> String {
                match self {
                    $(Question::$variant { $($arg,)* .. } => {
                        question_key(stringify!($method), &($($arg.to_wire(),)*))
                    })*
                    Question::Avoid { path } => question_key("avoid", &(path.to_wire(),)),
                }
            }
        }

        impl WireQuestion {
            pub fn of(asked: &Question) -> WireQuestion {
                match asked {
                    $(
                        Question::$variant { $($arg,)* answer } => {
                            WireQuestion::$variant {
                                $($arg: $arg.to_wire(),)*
                                answer: Some(answer.to_wire()),
                                error_kind: answer.error_kind().map(str::to_string),
                            }
                        }
                    )*
                    Question::Avoid { path } => WireQuestion::Avoid { path: path.to_wire() },
                }
            }

            /// The question alone, as [`Question::key`] says it: the key of a
            /// question read.
            pub fn question_key(&self) -> String {
                match self {
                    $(WireQuestion::$variant { $($arg,)* .. } => question_key(stringify!($method), &($($arg,)*)),)*
                    WireQuestion::MountsOfProcess { pid, .. } => question_key("mounts_of_process", &(pid,)),
                    WireQuestion::Avoid { path } => question_key("avoid", &(path,)),
                }
            }

            /// Drops the answer: the reader takes it from the last one to the same question.
            pub fn without_answer(&mut self) {
                match self {
                    $(WireQuestion::$variant { answer, error_kind, .. } => {
                        *answer = None;
                        *error_kind = None;
                    })*
                    WireQuestion::MountsOfProcess { answer, .. } => *answer = None,
                    WireQuestion::Avoid { .. } => {}
                }
            }

            /// The question and its answer, or None when the answer was left out
            /// (the caller finds it by `question_key`).
            pub fn into_asked(self) -> Result<Option<Question>, String> {
                let asked = match self {
                    $(
                        WireQuestion::$variant { $($arg,)* answer: Some(answer), error_kind } => Question::$variant {
                            $($arg: Recorded::from_wire($arg)
                                .map_err(|why| format!("{} {}: {why}", stringify!($method), stringify!($arg)))?,)*
                            answer: <$answer as Recorded>::from_wire(answer)?.with_error_kind(error_kind.as_deref()),
                        },
                    )*
                    WireQuestion::Avoid { path } => Question::Avoid { path: path.into_vec() },
                    _ => return Ok(None),
                };
                Ok(Some(asked.with_namespace_numbered()))
            }
        }
    };
}

node_questions!(wire_question_of);

impl WireQuestion {
    /// A question only older records hold, which no podstuck asks now: left out when read.
    pub fn is_retired(&self) -> bool {
        matches!(self, WireQuestion::MountsOfProcess { .. })
    }
}

impl Question {
    /// A namespace's answer names it by its question's argument, which
    /// the record writes once.
    fn with_namespace_numbered(mut self) -> Question {
        if let Question::MountNamespace { mntns, answer: Ok(namespace) } = &mut self {
            namespace.mntns = *mntns;
        }
        self
    }
}
