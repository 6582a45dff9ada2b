//! The real terminal behind the live view: raw mode and the alternate
//! screen while it runs, keys read from the controlling terminal, and the
//! terminal given back as it was on every way out: a key, a signal, the
//! end of `--duration`, an error, a panic.
//!
//! One thread of its own owns the terminal: it draws the latest
//! [`Screen`] and reads keys, so a slow or stalled terminal (a frozen ssh
//! session) never holds up tracing; `watch` only swaps in a new screen and
//! reads the keys that ask to stop. The keys that move over the findings,
//! expand one and copy its fix (OSC 52, written between two frames) stay
//! in that thread with the [`Selection`] they change.

use std::io::{IsTerminal, Write as _};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::thread::JoinHandle;
use std::time::Duration;

use crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use crossterm::terminal::{disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen};
use crossterm::{cursor, execute};
use ratatui::backend::CrosstermBackend;
use ratatui::Terminal;
use tokio::sync::mpsc;

use super::model::{Action, Screen, Selection};
use super::render;

/// How long the terminal thread waits for a key before looking for a new
/// screen to draw: the most a new screen waits to be drawn.
const KEY_WAIT: Duration = Duration::from_millis(40);
/// How long closing waits for the terminal thread before restoring the
/// terminal from under it.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// Set while the terminal is in raw mode on the alternate screen: the panic
/// hook restores it only then, and only once.
static TAKEN: AtomicBool = AtomicBool::new(false);

/// Why the live view asks the run to stop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Quit {
    /// `q`, or Ctrl-C (a key, not SIGINT, in raw mode).
    Key(&'static str),
    /// The terminal could not be drawn on or read from any more.
    TerminalFailed(String),
}

impl Quit {
    /// As the closing summary says it: "stopped by q".
    pub fn stopped_by(&self) -> &'static str {
        match self {
            Quit::Key(key) => key,
            Quit::TerminalFailed(_) => "a terminal error",
        }
    }
}

/// The key that asks to stop, if `key` is one.
pub fn quit_key(key: &KeyEvent) -> Option<Quit> {
    if key.kind != KeyEventKind::Press {
        return None;
    }
    match key.code {
        KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => Some(Quit::Key("Ctrl-C")),
        KeyCode::Char('q' | 'Q') if !key.modifiers.contains(KeyModifiers::CONTROL) => Some(Quit::Key("q")),
        _ => None,
    }
}

/// What `key` asks of the findings, if anything (the keys that stop are
/// [`quit_key`]'s).
pub fn view_key(key: &KeyEvent) -> Option<Action> {
    if key.kind != KeyEventKind::Press || key.modifiers.contains(KeyModifiers::CONTROL) {
        return None;
    }
    match key.code {
        KeyCode::Up | KeyCode::Char('k') => Some(Action::Up),
        KeyCode::Down | KeyCode::Char('j') => Some(Action::Down),
        KeyCode::Enter | KeyCode::Char('e') => Some(Action::Toggle),
        KeyCode::Esc => Some(Action::Close),
        KeyCode::Char('c') => Some(Action::Copy),
        _ => None,
    }
}

/// Leaves the alternate screen, shows the cursor and ends raw mode, if the
/// live view had taken the terminal. Safe to call from anywhere, twice.
fn restore() {
    if TAKEN.swap(false, Ordering::SeqCst) {
        let _ = execute!(std::io::stdout(), LeaveAlternateScreen, cursor::Show);
        let _ = disable_raw_mode();
    }
}

/// A panic must not leave the user's shell in raw mode on a blank screen,
/// and its message must land where it can be read.
fn restore_on_panic() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let earlier = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            earlier(info);
        }));
    });
}

/// What the watch loop and the terminal thread share.
struct Shared {
    /// The newest screen not drawn yet; a newer one replaces it.
    next: Mutex<Option<Screen>>,
    stop: AtomicBool,
}

/// The live view on the terminal, running. Dropping it gives the terminal
/// back as it was.
pub struct LiveTerminal {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    finished: std::sync::mpsc::Receiver<()>,
}

impl LiveTerminal {
    /// Whether the live view can run: standard output is a terminal that
    /// draws (not `TERM=dumb`), and there is a controlling terminal to read
    /// keys from (standard input may be a pipe: keys then come from
    /// /dev/tty).
    pub fn possible() -> bool {
        std::io::stdout().is_terminal()
            && std::env::var("TERM").map_or(true, |t| t != "dumb")
            && (std::io::stdin().is_terminal()
                || std::fs::OpenOptions::new().read(true).write(true).open("/dev/tty").is_ok())
    }

    /// Takes the terminal: raw mode, alternate screen, hidden cursor; with
    /// it, the keys that ask to stop (apart, so that waiting for them holds
    /// nothing else of the terminal).
    pub fn start() -> std::io::Result<(LiveTerminal, QuitKeys)> {
        restore_on_panic();
        enable_raw_mode()?;
        TAKEN.store(true, Ordering::SeqCst);
        let taken = execute!(std::io::stdout(), EnterAlternateScreen, cursor::Hide)
            .and_then(|()| Terminal::new(CrosstermBackend::new(std::io::stdout())));
        let terminal = match taken {
            Ok(terminal) => terminal,
            Err(e) => {
                restore();
                return Err(e);
            }
        };
        let shared = Arc::new(Shared { next: Mutex::new(None), stop: AtomicBool::new(false) });
        let (quit_tx, quits) = mpsc::unbounded_channel();
        let (finished_tx, finished) = std::sync::mpsc::channel();
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new().name("podstuck-view".into()).spawn(move || {
            if let Err(e) = run(terminal, &thread_shared, &quit_tx) {
                let _ = quit_tx.send(Quit::TerminalFailed(e.to_string()));
            }
            let _ = finished_tx.send(());
        });
        let thread = match thread {
            Ok(thread) => thread,
            Err(e) => {
                restore();
                return Err(e);
            }
        };
        Ok((LiveTerminal { shared, thread: Some(thread), finished }, QuitKeys { quits }))
    }

    /// Shows `screen` as soon as the terminal takes it; never waits on the
    /// terminal.
    pub fn show(&self, screen: Screen) {
        *self.shared.next.lock().unwrap_or_else(|e| e.into_inner()) = Some(screen);
    }

    /// Gives the terminal back as it was, so what is printed next lands on
    /// the user's own screen.
    pub fn close(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            // A thread stuck writing to a frozen terminal is left behind
            // rather than hanging the exit.
            if self.finished.recv_timeout(CLOSE_WAIT).is_ok() {
                let _ = thread.join();
            }
        }
        restore();
    }
}

/// The keys that ask a live view to stop.
pub struct QuitKeys {
    quits: mpsc::UnboundedReceiver<Quit>,
}

impl QuitKeys {
    /// Waits until the user asks to stop (or the terminal fails).
    pub async fn asked(&mut self) -> Quit {
        match self.quits.recv().await {
            Some(quit) => quit,
            None => Quit::TerminalFailed("the live view stopped".into()),
        }
    }
}

impl Drop for LiveTerminal {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The terminal thread: draw each new screen, read keys, until told to stop.
fn run(
    mut terminal: Terminal<CrosstermBackend<std::io::Stdout>>,
    shared: &Shared,
    quits: &mpsc::UnboundedSender<Quit>,
) -> std::io::Result<()> {
    let mut drawn: Option<Screen> = None;
    let mut selection = Selection::default();
    while !shared.stop.load(Ordering::SeqCst) {
        let mut redraw = false;
        if event::poll(KEY_WAIT)? {
            match event::read()? {
                Event::Key(key) => {
                    if let Some(quit) = quit_key(&key) {
                        let _ = quits.send(quit);
                    } else if let (Some(action), Some(screen)) = (view_key(&key), &drawn) {
                        if let Some(sequence) = selection.apply(action, &screen.findings) {
                            // Straight to the terminal, between two frames:
                            // it draws nothing, it sets the clipboard.
                            terminal.backend_mut().write_all(sequence.as_bytes())?;
                            terminal.backend_mut().flush()?;
                        }
                        redraw = true;
                    }
                }
                Event::Resize(..) => redraw = true,
                _ => {}
            }
        }
        let fresh = shared.next.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(screen) = fresh {
            selection.clamp(screen.findings.len());
            drawn = Some(screen);
            redraw = true;
        }
        if let (true, Some(screen)) = (redraw, &drawn) {
            terminal.draw(|frame| render::draw(frame, screen, &selection))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q_and_ctrl_c_ask_to_stop_other_keys_do_not() {
        let key = |code, modifiers| KeyEvent::new(code, modifiers);
        assert_eq!(quit_key(&key(KeyCode::Char('q'), KeyModifiers::NONE)), Some(Quit::Key("q")));
        assert_eq!(quit_key(&key(KeyCode::Char('Q'), KeyModifiers::SHIFT)), Some(Quit::Key("q")));
        assert_eq!(quit_key(&key(KeyCode::Char('c'), KeyModifiers::CONTROL)), Some(Quit::Key("Ctrl-C")));
        assert_eq!(quit_key(&key(KeyCode::Char('c'), KeyModifiers::NONE)), None);
        assert_eq!(quit_key(&key(KeyCode::Char('z'), KeyModifiers::CONTROL)), None);
        let mut release = key(KeyCode::Char('q'), KeyModifiers::NONE);
        release.kind = KeyEventKind::Release;
        assert_eq!(quit_key(&release), None);
        assert_eq!(Quit::Key("Ctrl-C").stopped_by(), "Ctrl-C");
    }

    #[test]
    fn arrows_and_vi_keys_move_enter_and_e_expand_esc_closes_c_copies() {
        let key = |code| KeyEvent::new(code, KeyModifiers::NONE);
        assert_eq!(view_key(&key(KeyCode::Up)), Some(Action::Up));
        assert_eq!(view_key(&key(KeyCode::Char('k'))), Some(Action::Up));
        assert_eq!(view_key(&key(KeyCode::Down)), Some(Action::Down));
        assert_eq!(view_key(&key(KeyCode::Char('j'))), Some(Action::Down));
        assert_eq!(view_key(&key(KeyCode::Enter)), Some(Action::Toggle));
        assert_eq!(view_key(&key(KeyCode::Char('e'))), Some(Action::Toggle));
        assert_eq!(view_key(&key(KeyCode::Esc)), Some(Action::Close));
        assert_eq!(view_key(&key(KeyCode::Char('c'))), Some(Action::Copy));
        // Ctrl-C stops; it never copies.
        assert_eq!(view_key(&KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)), None);
        assert_eq!(view_key(&key(KeyCode::Char('x'))), None);
    }
}
