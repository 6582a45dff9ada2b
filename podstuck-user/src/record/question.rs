//! A node question as a record holds it, with the answer the node gave:
//! one variant per question of the table (`inspect::questions`), its
//! arguments as a record keeps them. The recording and replaying nodes
//! (`node`) make and answer these; the record's wire question (`wire`)
//! writes and reads them, and says the key a question is found by.

use crate::inspect::questions::named::*;
use crate::inspect::questions::node_questions;

macro_rules! question_of {
    ($(
        $(#[$doc:meta])*
        fn $method:ident($($arg:ident: $ty:ty => $owned:ty $(= $older:expr)?),*) -> $answer:ty as $variant:ident;
    )*) => {
        /// One question a detector asked of the node during a review, with the
        /// answer it got: one variant per [`crate::inspect::NodeInspector`] method.
        #[derive(Clone, Debug, PartialEq)]
        pub enum Question {
            $($variant { $($arg: $owned,)* answer: $answer },)*
            /// Not a question: the detectors telling the node to stay away from a
            /// hung mount. Kept so the order of a review reads as it happened.
            Avoid { path: Vec<u8> },
        }
    };
}

node_questions!(question_of);
