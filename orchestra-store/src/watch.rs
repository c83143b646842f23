//! Watches: requests, responses, and the fan-out machinery the backends share.
//!
//! A backend publishes every committed write to its [`WatchHub`] in revision
//! order, right after the write became durable and readable. Each watch is a
//! stream that follows the hub; when it is behind (it started in the past, or
//! its consumer was slow and the hub's buffer moved on) it reads the missed
//! revisions from the backend's history through [`EventLog`], so a slow
//! watcher costs memory only in its own history reads, never in the hub.
//! Both are public, in [`crate::backend`].

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::Stream;
use parking_lot::Mutex;
use tokio::sync::broadcast;

use crate::error::{Error, Result};
use crate::kv::{Event, KeyRange, Revision};

/// What to watch, and from when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchRequest {
    /// The keys to watch.
    pub range: KeyRange,
    /// Deliver changes at revisions `>= start_revision`; 0 means changes after
    /// the current revision. To resume after a response at revision `r`,
    /// start at `r + 1`.
    pub start_revision: Revision,
    /// If set, a watch that delivered nothing for this long sends a progress
    /// notification: a response with no events carrying the revision up to
    /// which the watch is complete.
    pub progress_notify: Option<Duration>,
    /// Events of the range the watcher has no use for: see
    /// [`WatchRequest::with_filter`].
    pub filter: Option<EventFilter>,
}

impl WatchRequest {
    /// Watches `range` from now on.
    pub fn new(range: KeyRange) -> WatchRequest {
        WatchRequest { range, start_revision: 0, progress_notify: None, filter: None }
    }

    /// Starts at `revision` (inclusive).
    pub fn from_revision(mut self, revision: Revision) -> WatchRequest {
        self.start_revision = revision;
        self
    }

    /// Asks for progress notifications after `interval` without events.
    pub fn with_progress_notify(mut self, interval: Duration) -> WatchRequest {
        self.progress_notify = Some(interval);
        self
    }

    /// Lets the store leave out the events `filter` rejects. A hint, not a
    /// guarantee: a backend that cannot evaluate it (a remote one, a wrapper
    /// that transforms values) delivers them, so the watcher still decides
    /// for itself. What it buys is that a write whose events the filter all
    /// rejects does not wake the watch at all: a watcher interested in few
    /// of a busy range's writes (bound pods among all pods) is not woken
    /// for the others.
    pub fn with_filter(mut self, filter: EventFilter) -> WatchRequest {
        self.filter = Some(filter);
        self
    }
}

/// A predicate on a watch's events ([`WatchRequest::with_filter`]): `true`
/// keeps an event. It runs on the writer's path, for every event of the
/// watched range, so it must be cheap and must not block. Two filters are
/// equal when they are the same `Arc` (clones of one filter), which lets
/// watches with the same range and filter share their fan-out.
///
/// ```
/// use orchestra_store::{Event, EventFilter, EventKind, KeyValue};
///
/// // Deletes, and puts whose value mentions "nodeName".
/// let bound = EventFilter::new(|event: &Event| {
///     event.kind == EventKind::Delete || event.kv.value.windows(8).any(|w| w == b"nodeName")
/// });
/// let kv = KeyValue {
///     key: "/p".into(),
///     value: "{}".into(),
///     create_revision: 1,
///     mod_revision: 1,
///     version: 1,
///     expires_at_ms: None,
/// };
/// assert!(!bound.accepts(&Event { kind: EventKind::Put, kv, prev_kv: None }));
/// assert_eq!(bound, bound.clone());
/// ```
#[derive(Clone)]
pub struct EventFilter(Arc<dyn Fn(&Event) -> bool + Send + Sync>);

impl EventFilter {
    /// The filter keeping the events `keep` accepts.
    pub fn new(keep: impl Fn(&Event) -> bool + Send + Sync + 'static) -> EventFilter {
        EventFilter(Arc::new(keep))
    }

    /// Whether the filter keeps `event`.
    pub fn accepts(&self, event: &Event) -> bool {
        (self.0)(event)
    }
}

impl std::fmt::Debug for EventFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EventFilter(..)")
    }
}

impl PartialEq for EventFilter {
    fn eq(&self, other: &EventFilter) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for EventFilter {}

/// What a watch receives: the events of its range its filter keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Interest {
    range: KeyRange,
    filter: Option<EventFilter>,
}

impl Interest {
    fn of(request: &WatchRequest) -> Interest {
        Interest { range: request.range.clone(), filter: request.filter.clone() }
    }

    fn wants(&self, event: &Event) -> bool {
        self.range.contains(&event.kv.key) && self.filter.as_ref().is_none_or(|filter| filter.accepts(event))
    }
}

/// One message of a watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchResponse {
    /// The watch has delivered every change up to and including this revision.
    pub revision: Revision,
    /// The changes, in revision order; empty for a progress notification.
    pub events: Vec<Event>,
}

impl WatchResponse {
    /// True for a progress notification (no events).
    pub fn is_progress_notify(&self) -> bool {
        self.events.is_empty()
    }
}

/// The stream of a watch. It ends after an error item: [`Error::Compacted`]
/// when the watch fell behind the retained history, [`Error::Unavailable`]
/// when the store shut down. Dropping it cancels the watch.
pub type WatchStream = Pin<Box<dyn Stream<Item = Result<WatchResponse>> + Send>>;

/// A backend's history of committed changes, read by the watches of a
/// [`WatchHub`] that are behind it: a watch that starts at a past revision,
/// or one whose consumer was slower than the hub's buffer.
///
/// Implementations are usually a handle to the backend's shared state (the
/// hub holds one per watch); for a backend that keeps its history in memory,
/// [`RevisionLog`](crate::backend::RevisionLog) serves the events.
///
/// A log over a [`RevisionLog`](crate::backend::RevisionLog) that refuses the
/// revisions compaction dropped, as the contract asks (the [`WatchHub`]
/// example shows a log serving watches):
///
/// ```
/// use std::sync::Mutex;
///
/// use orchestra_store::backend::{EventLog, RevisionLog};
/// use orchestra_store::{Error, Event, EventKind, KeyRange, KeyValue, Result, Revision, StoreStatus};
///
/// #[derive(Default)]
/// struct History(Mutex<(RevisionLog, StoreStatus)>);
///
/// #[async_trait::async_trait]
/// impl EventLog for History {
///     async fn events(&self, range: &KeyRange, from: Revision, to: Revision) -> Result<Vec<Event>> {
///         let state = self.0.lock().unwrap();
///         state.1.check_watch_from(from)?;
///         Ok(state.0.events(range, from, to))
///     }
/// }
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let history = History::default();
/// for revision in 1..=3 {
///     let kv = KeyValue {
///         key: format!("/a/{revision}"),
///         value: "v".into(),
///         create_revision: revision,
///         mod_revision: revision,
///         version: 1,
///         expires_at_ms: None,
///     };
///     let mut state = history.0.lock().unwrap();
///     state.0.append(revision, vec![Event { kind: EventKind::Put, kv, prev_kv: None }]);
///     state.1.revision = revision;
/// }
/// {
///     let mut state = history.0.lock().unwrap();
///     state.0.compact(2);
///     state.1.compact_revision = 2;
/// }
/// assert_eq!(history.events(&KeyRange::prefix("/a/"), 2, 3).await.unwrap().len(), 2);
/// assert!(matches!(history.events(&KeyRange::prefix("/a/"), 1, 3).await, Err(Error::Compacted { .. })));
/// # });
/// ```
#[async_trait]
pub trait EventLog: Send + Sync + 'static {
    /// Every event at revisions `from..=to` within `range`, in revision order.
    /// Every revision up to `to` has been published to the hub, so the log
    /// must hold it. Fails with [`Error::Compacted`] if `from` is before the
    /// compaction revision: a watch must never skip a revision silently.
    async fn events(&self, range: &KeyRange, from: Revision, to: Revision) -> Result<Vec<Event>>;
}

/// Revisions replayed from history per read, bounding a lagging watch's memory.
const REPLAY_WINDOW: Revision = 1024;

/// Commit groups the hub buffers for watches that are momentarily behind.
const HUB_CAPACITY: usize = 1024;

/// The changes of one commit group, which ends at revision `last`.
#[derive(Debug)]
struct Committed {
    last: Revision,
    events: Vec<Event>,
}

/// The last published revision and the channels, under one lock so that a
/// watch's subscription and its view of "published so far" always agree.
type HubState = Mutex<Channels>;

/// One broadcast channel per distinct watched range and filter. A commit
/// group is sent only to the channels one of whose events it wants (etcd
/// groups its watchers by key the same way), so a write wakes the watches
/// it concerns and no others: a server with watches on many prefixes does
/// not pay for waking all of them on every write.
struct Channels {
    published: Revision,
    channels: Vec<(Interest, broadcast::Sender<Arc<Committed>>)>,
}

impl Channels {
    /// A receiver of every group published from now on that `interest` wants.
    fn subscribe(&mut self, interest: &Interest) -> broadcast::Receiver<Arc<Committed>> {
        if let Some((_, sender)) = self.channels.iter().find(|(watched, _)| watched == interest) {
            return sender.subscribe();
        }
        let (sender, receiver) = broadcast::channel(HUB_CAPACITY);
        self.channels.push((interest.clone(), sender));
        receiver
    }
}

/// Fans committed changes out to watches: all of
/// [`Store::watch`](crate::Store::watch) but the compaction check and the
/// history.
///
/// A backend owns one hub. After every write it publishes the write's
/// events, in revision order; [`watch`](WatchHub::watch) starts a stream that
/// delivers every change from the request's start revision on — exactly
/// once, in order, with progress notifications — reading the revisions it
/// missed from the backend's [`EventLog`]. Dropping the hub ends its watches
/// with [`Error::Unavailable`].
///
/// ```
/// use std::sync::{Arc, Mutex};
///
/// use futures::StreamExt;
/// use orchestra_store::backend::{EventLog, RevisionLog, WatchHub};
/// use orchestra_store::{Event, EventKind, KeyRange, KeyValue, Result, Revision, WatchRequest};
///
/// /// The history watches read when they are behind (never compacted here).
/// #[derive(Default)]
/// struct History(Mutex<RevisionLog>);
///
/// #[async_trait::async_trait]
/// impl EventLog for History {
///     async fn events(&self, range: &KeyRange, from: Revision, to: Revision) -> Result<Vec<Event>> {
///         Ok(self.0.lock().unwrap().events(range, from, to))
///     }
/// }
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let (history, hub) = (Arc::new(History::default()), WatchHub::new(0));
/// let live = hub.watch(history.clone(), WatchRequest::new(KeyRange::prefix("/a/")));
///
/// // A write at revision 1: readable from the history first, then published.
/// let kv = KeyValue {
///     key: "/a/1".into(),
///     value: "v".into(),
///     create_revision: 1,
///     mod_revision: 1,
///     version: 1,
///     expires_at_ms: None,
/// };
/// let events = vec![Event { kind: EventKind::Put, kv, prev_kv: None }];
/// history.0.lock().unwrap().append(1, events.clone());
/// hub.publish(1, 1, events);
///
/// // The live watch gets it from the hub, one from revision 1 from the history.
/// let past = hub.watch(history, WatchRequest::new(KeyRange::prefix("/a/")).from_revision(1));
/// for mut watch in [live, past] {
///     let response = watch.next().await.unwrap().unwrap();
///     assert_eq!((response.revision, response.events[0].kv.key.as_str()), (1, "/a/1"));
/// }
/// # });
/// ```
pub struct WatchHub {
    inner: Arc<HubState>,
}

impl std::fmt::Debug for WatchHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.inner.lock();
        f.debug_struct("WatchHub")
            .field("published", &inner.published)
            .field("channels", &inner.channels.len())
            .finish_non_exhaustive()
    }
}

impl WatchHub {
    /// A hub whose history ends at `revision`: the backend's current
    /// revision (0 for an empty store).
    pub fn new(revision: Revision) -> WatchHub {
        WatchHub { inner: Arc::new(Mutex::new(Channels { published: revision, channels: Vec::new() })) }
    }

    /// Publishes the events of revisions `first..=last` (possibly none: a
    /// write may change nothing a watch can see, the revision still moved).
    /// Callers publish in revision order — `first` is the revision after the
    /// last one published — after the changes are readable from their
    /// [`EventLog`]; a backend that commits under a lock publishes under it.
    pub fn publish(&self, first: Revision, last: Revision, events: Vec<Event>) {
        let mut inner = self.inner.lock();
        debug_assert!(first == inner.published + 1, "published {first} after {}", inner.published);
        inner.published = last;
        let committed = Arc::new(Committed { last, events });
        inner.channels.retain(|(interest, sender)| {
            // A channel whose watches all ended goes.
            if sender.receiver_count() == 0 {
                return false;
            }
            if committed.events.iter().any(|event| interest.wants(event)) {
                // Receivers that drop meanwhile are fine: nobody is watching.
                let _ = sender.send(committed.clone());
            }
            true
        });
    }

    /// Starts a watch that reads the revisions it missed from `log`. The
    /// caller has checked the request's start revision against the
    /// compaction revision already
    /// ([`StoreStatus::check_watch_from`](crate::StoreStatus::check_watch_from)).
    /// The stream must be polled inside a Tokio runtime.
    pub fn watch(&self, log: Arc<dyn EventLog>, request: WatchRequest) -> WatchStream {
        let interest = Interest::of(&request);
        let (published, receiver) = {
            let mut inner = self.inner.lock();
            (inner.published, inner.subscribe(&interest))
        };
        let next = if request.start_revision > 0 { request.start_revision } else { published + 1 };
        let state = Watcher {
            hub: Arc::downgrade(&self.inner),
            log,
            interest,
            progress_notify: request.progress_notify,
            receiver,
            published,
            next,
            done: false,
        };
        Box::pin(futures::stream::unfold(state, |mut state| async move {
            if state.done {
                return None;
            }
            let item = state.next_response().await;
            state.done = item.is_err();
            Some((item, state))
        }))
    }
}

/// One watch's position in the revision sequence.
struct Watcher {
    /// Weak, so that dropping the store closes its watches.
    hub: std::sync::Weak<HubState>,
    log: Arc<dyn EventLog>,
    interest: Interest,
    progress_notify: Option<Duration>,
    receiver: broadcast::Receiver<Arc<Committed>>,
    /// Every revision up to here is readable from the log.
    published: Revision,
    /// The next revision this watch has to look at.
    next: Revision,
    done: bool,
}

impl Watcher {
    /// Waits for the next non-empty response (or a progress notification).
    async fn next_response(&mut self) -> Result<WatchResponse> {
        let deadline = self.progress_notify.map(|d| tokio::time::Instant::now() + d);
        loop {
            // Behind the hub: catch up from history, a window at a time.
            if self.next <= self.published {
                let to = self.published.min(self.next + REPLAY_WINDOW - 1);
                let mut events = self.log.events(&self.interest.range, self.next, to).await?;
                if let Some(filter) = &self.interest.filter {
                    events.retain(|event| filter.accepts(event));
                }
                self.next = to + 1;
                if !events.is_empty() {
                    return Ok(WatchResponse { revision: to, events });
                }
                continue;
            }
            let received = match deadline {
                None => self.receiver.recv().await,
                Some(deadline) => match tokio::time::timeout_at(deadline, self.receiver.recv()).await {
                    Ok(received) => received,
                    Err(_) => {
                        self.skip_quiet_revisions();
                        let revision = (self.next - 1).min(self.published);
                        return Ok(WatchResponse { revision, events: Vec::new() });
                    }
                },
            };
            match received {
                Ok(group) => {
                    if group.last < self.next {
                        continue;
                    }
                    let events: Vec<Event> = group
                        .events
                        .iter()
                        .filter(|e| e.revision() >= self.next && self.interest.wants(e))
                        .cloned()
                        .collect();
                    self.published = self.published.max(group.last);
                    self.next = group.last + 1;
                    if !events.is_empty() {
                        return Ok(WatchResponse { revision: group.last, events });
                    }
                }
                // The consumer was slow and the hub dropped groups: everything
                // published so far is in the log, replay it from there.
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    let Some(hub) = self.hub.upgrade() else {
                        return Err(Error::Unavailable("the store is shut down".into()));
                    };
                    let mut hub = hub.lock();
                    self.receiver = hub.subscribe(&self.interest);
                    self.published = hub.published;
                }
                Err(broadcast::error::RecvError::Closed) => {
                    return Err(Error::Unavailable("the store is shut down".into()));
                }
            }
        }
    }

    /// Moves a watch that is caught up past the revisions published since
    /// its last group: the hub sent it every group touching its range, so
    /// when none is waiting in its channel, none of those revisions concern
    /// it. A progress notification then carries the store's revision, not
    /// that of the last change in the watch's range.
    fn skip_quiet_revisions(&mut self) {
        let Some(hub) = self.hub.upgrade() else { return };
        // Under the lock no group is being sent, so an empty channel means
        // nothing up to the hub's revision is on its way.
        let hub = hub.lock();
        if self.next > self.published && self.receiver.is_empty() {
            self.published = hub.published;
            self.next = hub.published + 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt as _;

    use super::*;
    use crate::backend::RevisionLog;
    use crate::kv::{EventKind, KeyValue};

    #[derive(Default)]
    struct History(Mutex<RevisionLog>);

    #[async_trait]
    impl EventLog for History {
        async fn events(&self, range: &KeyRange, from: Revision, to: Revision) -> Result<Vec<Event>> {
            Ok(self.0.lock().events(range, from, to))
        }
    }

    fn put(key: &str, revision: Revision) -> Event {
        let kv = KeyValue {
            key: key.into(),
            value: "v".into(),
            create_revision: revision,
            mod_revision: revision,
            version: 1,
            expires_at_ms: None,
        };
        Event { kind: EventKind::Put, kv, prev_kv: None }
    }

    fn interest(prefix: &str, filter: Option<&EventFilter>) -> Interest {
        Interest { range: KeyRange::prefix(prefix), filter: filter.cloned() }
    }

    /// Each case: the ranges watched, then the keys written one revision
    /// each; after the writes, how many groups wait in each range's channel
    /// and how many channels the hub keeps.
    #[tokio::test]
    async fn commits_reach_only_the_channels_of_their_ranges() {
        struct Case {
            name: &'static str,
            watched: &'static [&'static str],
            writes: &'static [&'static str],
            queued: &'static [usize],
            channels: usize,
        }
        let cases = [
            Case { name: "one range", watched: &["/a/"], writes: &["/a/1", "/b/1"], queued: &[1], channels: 1 },
            Case {
                name: "disjoint ranges",
                watched: &["/a/", "/b/"],
                writes: &["/a/1", "/a/2", "/b/1"],
                queued: &[2, 1],
                channels: 2,
            },
            Case {
                name: "one range watched twice shares a channel",
                watched: &["/a/", "/a/"],
                writes: &["/a/1"],
                queued: &[1, 1],
                channels: 1,
            },
            Case {
                name: "nested ranges",
                watched: &["/", "/a/"],
                writes: &["/a/1", "/b/1"],
                queued: &[2, 1],
                channels: 2,
            },
            Case { name: "nothing in range", watched: &["/c/"], writes: &["/a/1", "/b/1"], queued: &[0], channels: 1 },
        ];
        for case in cases {
            let hub = WatchHub::new(0);
            let receivers: Vec<_> =
                case.watched.iter().map(|prefix| hub.inner.lock().subscribe(&interest(prefix, None))).collect();
            for (i, key) in case.writes.iter().enumerate() {
                let revision = i as Revision + 1;
                hub.publish(revision, revision, vec![put(key, revision)]);
            }
            let queued: Vec<usize> = receivers.iter().map(broadcast::Receiver::len).collect();
            assert_eq!(queued, case.queued, "{}: groups queued per watch", case.name);
            assert_eq!(hub.inner.lock().channels.len(), case.channels, "{}: channels", case.name);
        }
    }

    #[tokio::test]
    async fn channels_of_ended_watches_go_at_the_next_publish() {
        let hub = WatchHub::new(0);
        let history = Arc::new(History::default());
        let a = hub.watch(history.clone(), WatchRequest::new(KeyRange::prefix("/a/")));
        let b = hub.watch(history.clone(), WatchRequest::new(KeyRange::prefix("/b/")));
        assert_eq!(hub.inner.lock().channels.len(), 2);
        drop(b);
        history.0.lock().append(1, vec![put("/a/1", 1)]);
        hub.publish(1, 1, vec![put("/a/1", 1)]);
        let channels: Vec<KeyRange> =
            hub.inner.lock().channels.iter().map(|(interest, _)| interest.range.clone()).collect();
        assert_eq!(channels, vec![KeyRange::prefix("/a/")]);
        drop(a);
    }

    /// A watch that no write concerns reports the hub's revision in its
    /// progress notifications, and still gets the next write in its range.
    #[tokio::test]
    async fn progress_of_a_quiet_watch_carries_the_hub_revision() {
        let hub = WatchHub::new(0);
        let history = Arc::new(History::default());
        let request = WatchRequest::new(KeyRange::prefix("/a/")).with_progress_notify(Duration::from_millis(20));
        let mut watch = hub.watch(history.clone(), request);
        for revision in 1..=3 {
            let events = vec![put(&format!("/b/{revision}"), revision)];
            history.0.lock().append(revision, events.clone());
            hub.publish(revision, revision, events);
        }
        let progress = watch.next().await.unwrap().unwrap();
        assert_eq!((progress.revision, progress.events.len()), (3, 0));
        let events = vec![put("/a/4", 4)];
        history.0.lock().append(4, events.clone());
        hub.publish(4, 4, events);
        let response = watch.next().await.unwrap().unwrap();
        assert_eq!((response.revision, response.events[0].kv.key.as_str()), (4, "/a/4"));
    }

    /// Each case: the filters of watches on `/a/` (`odd`: keys ending in an
    /// odd digit; `odd2`: the same predicate, another filter), the keys
    /// written; then the groups queued per watch and the channels kept.
    #[tokio::test]
    async fn filtered_watches_are_woken_only_for_what_they_keep() {
        let odd = EventFilter::new(|event: &Event| event.kv.key.ends_with(['1', '3', '5', '7', '9']));
        let odd2 = EventFilter::new(|event: &Event| event.kv.key.ends_with(['1', '3', '5', '7', '9']));
        /// Name, the watches' filters, the keys written, the groups queued
        /// per watch, the channels kept.
        type Case<'a> = (&'a str, Vec<Option<&'a EventFilter>>, &'a [&'a str], &'a [usize], usize);
        let cases: [Case<'_>; 4] = [
            ("rejected writes queue nothing", vec![Some(&odd)], &["/a/2", "/a/4"], &[0], 1),
            ("kept and rejected", vec![Some(&odd), None], &["/a/1", "/a/2"], &[1, 2], 2),
            ("one filter shares a channel", vec![Some(&odd), Some(&odd)], &["/a/3"], &[1, 1], 1),
            ("equal predicates do not", vec![Some(&odd), Some(&odd2)], &["/a/3", "/a/4"], &[1, 1], 2),
        ];
        for (name, filters, writes, queued, channels) in cases {
            let hub = WatchHub::new(0);
            let receivers: Vec<_> =
                filters.iter().map(|filter| hub.inner.lock().subscribe(&interest("/a/", *filter))).collect();
            for (i, key) in writes.iter().enumerate() {
                let revision = i as Revision + 1;
                hub.publish(revision, revision, vec![put(key, revision)]);
            }
            let got: Vec<usize> = receivers.iter().map(broadcast::Receiver::len).collect();
            assert_eq!(got, queued, "{name}: groups queued per watch");
            assert_eq!(hub.inner.lock().channels.len(), channels, "{name}: channels");
        }
    }

    /// A filtered watch delivers only the events its filter keeps, from
    /// history and live.
    #[tokio::test]
    async fn filtered_watches_deliver_what_they_keep() {
        let hub = WatchHub::new(0);
        let history = Arc::new(History::default());
        let odd = EventFilter::new(|event: &Event| event.kv.key.ends_with(['1', '3', '5', '7', '9']));
        let write = |revision: Revision, keys: &[&str]| {
            let events: Vec<Event> = keys.iter().map(|key| put(key, revision)).collect();
            history.0.lock().append(revision, events.clone());
            hub.publish(revision, revision, events);
        };
        write(1, &["/a/1", "/a/2"]);
        write(2, &["/a/4"]);
        let request = WatchRequest::new(KeyRange::prefix("/a/")).with_filter(odd);
        let mut past = hub.watch(history.clone(), request.clone().from_revision(1));
        let mut live = hub.watch(history.clone(), request);
        write(3, &["/a/6", "/a/3", "/b/5"]);
        let keys = |response: WatchResponse| -> Vec<String> { response.events.into_iter().map(|e| e.kv.key).collect() };
        assert_eq!(keys(past.next().await.unwrap().unwrap()), ["/a/1"], "replayed");
        for watch in [&mut past, &mut live] {
            let response = watch.next().await.unwrap().unwrap();
            assert_eq!(response.revision, 3);
            assert_eq!(keys(response), ["/a/3"], "live");
        }
    }
}
