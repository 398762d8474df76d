//! The CSR cache, which the controller's watch fills: the objects by name, each behind an `Arc` shared with whoever reads
//! it. A relist gathers what it lists in a plain list beside the cache and, when complete, builds
//! the cache's sets from it in place of the old ones, so readers see either the old state or the
//! new, never half a list, and no second pair of sets is held. An object the relist finds
//! unchanged is the cached one, shared by both: a relist holds a second copy only of what changed.
//! Objects that name a group (a kubelet-serving CSR: its requester) are also indexed by it, so
//! a reader asks for one group without a pass over the whole cache.

use std::borrow::Borrow;
use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, PoisonError, RwLock};

use kube::runtime::watcher::Event;

/// An object the cache keys by name.
pub trait Named {
    /// The name the cache keys it by (shared, not copied, by the cache and its readers).
    fn name(&self) -> &Arc<str>;

    /// The group the cache also indexes it by, if any ([`Cache::in_group`]).
    fn group(&self) -> Option<&Arc<str>> {
        None
    }

    /// Holds `group`, the same text as its own group that the cache already holds, in place of
    /// its own copy: a group's members share one.
    fn share_group(&mut self, _group: &Arc<str>) {}

    /// The bytes of it the cache counts ([`CacheWriter::weight`]).
    fn weight(&self) -> usize;
}

/// One set of objects: by name, and the grouped ones by group. Each is a set of entries that
/// read their key from the objects themselves, so a key costs no room of its own (a map keyed by
/// name held a second pointer to each name).
struct Objects<T> {
    by_name: HashSet<ByName<T>>,
    by_group: HashSet<Group<T>>,
    /// The sum of their weights ([`Named::weight`]).
    weight: usize,
}

impl<T> Default for Objects<T> {
    fn default() -> Self {
        Objects { by_name: HashSet::new(), by_group: HashSet::new(), weight: 0 }
    }
}

/// An object in a set keyed by its name ([`Named::name`]).
struct ByName<T>(Arc<T>);

impl<T: Named> Borrow<str> for ByName<T> {
    fn borrow(&self) -> &str {
        self.0.name()
    }
}

impl<T: Named> Hash for ByName<T> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        str::hash(self.0.name(), state);
    }
}

impl<T: Named> PartialEq for ByName<T> {
    fn eq(&self, other: &Self) -> bool {
        self.0.name() == other.0.name()
    }
}

impl<T: Named> Eq for ByName<T> {}

/// The objects of one group, in a set keyed by their group ([`Named::group`]): never empty, and
/// one object (most groups) held without an allocation of its own. Either way one pointer and a
/// tag, so a slot of the set is 16 bytes.
#[expect(clippy::box_collection, reason = "a thin pointer: the list inline would make every slot 24 bytes")]
enum Group<T> {
    One(Arc<T>),
    Many(Box<Vec<Arc<T>>>),
}

impl<T> Group<T> {
    fn members(&self) -> &[Arc<T>] {
        match self {
            Group::One(member) => std::slice::from_ref(member),
            Group::Many(members) => members,
        }
    }
}

impl<T: Named> Borrow<str> for Group<T> {
    fn borrow(&self) -> &str {
        self.members().first().and_then(|member| member.group()).map_or("", |group| group)
    }
}

impl<T: Named> Hash for Group<T> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        str::hash(self.borrow(), state);
    }
}

impl<T: Named> PartialEq for Group<T> {
    fn eq(&self, other: &Self) -> bool {
        Borrow::<str>::borrow(self) == Borrow::<str>::borrow(other)
    }
}

impl<T: Named> Eq for Group<T> {}

impl<T: Named> Objects<T> {
    /// Adds `object`, replacing the one of its name.
    fn insert(&mut self, object: Arc<T>) {
        self.weight += object.weight();
        if let Some(replaced) = self.by_name.replace(ByName(object.clone())) {
            self.weight -= replaced.0.weight();
            self.ungroup(&replaced.0);
        }
        let Some(group) = object.group() else { return };
        let members = match self.by_group.take(&**group) {
            None => Group::One(object),
            Some(Group::One(first)) => Group::Many(Box::new(vec![first, object])),
            Some(Group::Many(mut members)) => {
                members.push(object);
                Group::Many(members)
            }
        };
        self.by_group.insert(members);
    }

    /// Removes the object named `name`.
    fn remove(&mut self, name: &str) {
        if let Some(removed) = self.by_name.take(name) {
            self.weight -= removed.0.weight();
            self.ungroup(&removed.0);
        }
    }

    fn ungroup(&mut self, object: &Arc<T>) {
        let Some(group) = object.group() else { return };
        let rest = match self.by_group.take(&**group) {
            None => None,
            Some(Group::One(member)) => (!Arc::ptr_eq(&member, object)).then_some(Group::One(member)),
            Some(Group::Many(mut members)) => {
                members.retain(|member| !Arc::ptr_eq(member, object));
                if members.len() > 1 { Some(Group::Many(members)) } else { members.pop().map(Group::One) }
            }
        };
        if let Some(rest) = rest {
            self.by_group.insert(rest);
        }
    }
}

/// What the cache holds.
struct State<T> {
    objects: Objects<T>,
    /// The objects of a list under way, in the order listed: the cache's sets are built from them
    /// when it completes.
    listing: Option<Vec<Arc<T>>>,
    /// The sum of the weights of `listing`'s objects.
    listed_weight: usize,
    /// A list has completed at least once.
    ready: bool,
}

impl<T: Named + PartialEq> State<T> {
    /// `object` behind an `Arc`: the cached one when it is equal to it, so an unchanged object
    /// (a relist, a watch restarted) is held once, whichever set holds it; else a new one that
    /// shares its group's text with the cached members of its group.
    fn shared(&self, mut object: T) -> Arc<T> {
        let held = object.group().and_then(|group| self.objects.by_group.get::<str>(group));
        if let Some(group) = held.and_then(|members| members.members().first()?.group().cloned()) {
            object.share_group(&group);
        }
        match self.objects.by_name.get::<str>(object.name()) {
            Some(ByName(cached)) if **cached == object => cached.clone(),
            _ => Arc::new(object),
        }
    }
}

/// Reads the cache. Cheap to clone.
pub struct Cache<T> {
    state: Arc<RwLock<State<T>>>,
}

impl<T> Clone for Cache<T> {
    fn clone(&self) -> Self {
        Cache { state: self.state.clone() }
    }
}

/// Fills the cache from watch events; one per cache.
pub struct CacheWriter<T> {
    cache: Cache<T>,
}

/// A new empty cache: its reader and its writer.
pub fn cache<T>() -> (Cache<T>, CacheWriter<T>) {
    let state = State { objects: Objects::default(), listing: None, listed_weight: 0, ready: false };
    let cache = Cache { state: Arc::new(RwLock::new(state)) };
    (cache.clone(), CacheWriter { cache })
}

impl<T: Named> Cache<T> {
    /// The object named `name`, if cached.
    pub fn get(&self, name: &str) -> Option<Arc<T>> {
        self.state
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .objects
            .by_name
            .get(name)
            .map(|cached| cached.0.clone())
    }

    /// Every cached object, in no particular order.
    pub fn state(&self) -> Vec<Arc<T>> {
        self.state
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .objects
            .by_name
            .iter()
            .map(|cached| cached.0.clone())
            .collect()
    }

    /// The cached objects that `keep` answers true for, in no particular order: one pass under
    /// the cache's read lock, so `keep` must take no lock of its own.
    pub fn filtered(&self, keep: impl Fn(&T) -> bool) -> Vec<Arc<T>> {
        let state = self.state.read().unwrap_or_else(PoisonError::into_inner);
        // Room for all of them at once: no list grown by doubling, with up to twice the room.
        let mut kept = Vec::with_capacity(state.objects.by_name.len());
        kept.extend(state.objects.by_name.iter().filter(|cached| keep(&cached.0)).map(|cached| cached.0.clone()));
        kept
    }

    /// `read` applied to the cached objects of group `group` ([`Named::group`]), in no
    /// particular order, under the cache's read lock: nothing is copied.
    pub fn in_group<R>(&self, group: &str, read: impl FnOnce(&[Arc<T>]) -> R) -> R {
        let state = self.state.read().unwrap_or_else(PoisonError::into_inner);
        read(state.objects.by_group.get(group).map_or(&[], Group::members))
    }

    /// Puts `with` in place of `cached` (an object of the same name and group), when the cache
    /// still holds `cached` itself, not a version the watch brought since; answers whether it did.
    /// A list under way keeps what it listed: its objects replace the cache's when it completes.
    pub fn replace(&self, cached: &Arc<T>, with: T) -> bool {
        let mut state = self.state.write().unwrap_or_else(PoisonError::into_inner);
        let held = state.objects.by_name.get::<str>(cached.name()).is_some_and(|held| Arc::ptr_eq(&held.0, cached));
        if held {
            state.objects.insert(Arc::new(with));
        }
        held
    }

    /// True once a list has completed: the cache holds what existed then.
    pub fn is_ready(&self) -> bool {
        self.state.read().unwrap_or_else(PoisonError::into_inner).ready
    }
}

impl<T: Named + PartialEq> CacheWriter<T> {
    /// A reader of this writer's cache.
    pub fn reader(&self) -> Cache<T> {
        self.cache.clone()
    }

    /// How many objects the cache holds, or, while a list is under way, the larger of that and how
    /// many the list brought so far.
    pub fn size(&self) -> usize {
        let state = self.cache.state.read().unwrap_or_else(PoisonError::into_inner);
        let listed = state.listing.as_ref().map_or(0, Vec::len);
        state.objects.by_name.len().max(listed)
    }

    /// The weight of the objects the cache holds ([`Named::weight`]), or, while a list is under
    /// way, the larger of that and the weight of those the list brought so far.
    pub fn weight(&self) -> usize {
        let state = self.cache.state.read().unwrap_or_else(PoisonError::into_inner);
        state.objects.weight.max(state.listed_weight)
    }

    /// Applies one watch event to the cache, its object turned into what the cache keeps, and
    /// hands back the event with the object as cached.
    pub fn apply(&mut self, event: Event<impl Into<T>>) -> Event<Arc<T>> {
        let mut state = self.cache.state.write().unwrap_or_else(PoisonError::into_inner);
        match event {
            Event::Apply(object) => {
                let object = state.shared(object.into());
                state.objects.insert(object.clone());
                Event::Apply(object)
            }
            Event::Delete(object) => {
                let object: T = object.into();
                state.objects.remove(object.name());
                Event::Delete(Arc::new(object))
            }
            Event::Init => {
                state.listing = Some(Vec::new());
                state.listed_weight = 0;
                Event::Init
            }
            Event::InitApply(object) => {
                let object = state.shared(object.into());
                state.listed_weight += object.weight();
                state.listing.get_or_insert_default().push(object.clone());
                Event::InitApply(object)
            }
            Event::InitDone => {
                let listed = state.listing.take().unwrap_or_default();
                state.listed_weight = 0;
                // The old sets go before the new ones are built: never two pairs at once.
                state.objects = Objects::default();
                state.objects.by_name.reserve(listed.len());
                for object in listed {
                    state.objects.insert(object);
                }
                state.ready = true;
                Event::InitDone
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    struct Object(Arc<str>, u32, Option<Arc<str>>);

    impl Named for Object {
        fn name(&self) -> &Arc<str> {
            &self.0
        }

        fn group(&self) -> Option<&Arc<str>> {
            self.2.as_ref()
        }

        fn share_group(&mut self, group: &Arc<str>) {
            self.2 = Some(group.clone());
        }

        /// Its version, for the weight tests.
        fn weight(&self) -> usize {
            self.1 as usize
        }
    }

    fn object(name: &str, version: u32) -> Object {
        Object(name.into(), version, None)
    }

    fn grouped(name: &str, version: u32, group: &str) -> Object {
        Object(name.into(), version, Some(group.into()))
    }

    fn group(cache: &Cache<Object>, group: &str) -> Vec<(String, u32)> {
        let mut members: Vec<(String, u32)> =
            cache.in_group(group, |objects| objects.iter().map(|o| (o.0.to_string(), o.1)).collect());
        members.sort();
        members
    }

    #[test]
    fn a_group_holds_exactly_the_cached_objects_that_name_it() {
        let (cache, mut writer) = cache::<Object>();
        writer.apply(Event::Apply(grouped("a", 1, "g")));
        writer.apply(Event::Apply(grouped("b", 1, "g")));
        writer.apply(Event::Apply(grouped("c", 1, "h")));
        writer.apply(Event::Apply(object("d", 1)));
        assert_eq!(group(&cache, "g"), [("a".into(), 1), ("b".into(), 1)]);
        writer.apply(Event::Apply(grouped("a", 2, "g")));
        writer.apply(Event::Apply(grouped("b", 1, "g")));
        assert_eq!(group(&cache, "g"), [("a".into(), 2), ("b".into(), 1)], "replaced, unchanged: once each");
        writer.apply(Event::Delete(grouped("a", 3, "g")));
        assert_eq!(group(&cache, "g"), [("b".into(), 1)]);
        assert_eq!(group(&cache, "h"), [("c".into(), 1)]);
        assert!(group(&cache, "d").is_empty(), "an object without a group is in none");
        writer.apply(Event::<Object>::Init);
        writer.apply(Event::InitApply(grouped("e", 1, "g")));
        assert_eq!(group(&cache, "g"), [("b".into(), 1)], "a list under way is not seen");
        writer.apply(Event::<Object>::InitDone);
        assert_eq!(group(&cache, "g"), [("e".into(), 1)]);
        assert!(group(&cache, "h").is_empty(), "a relist's groups replace the old ones");
        writer.apply(Event::Delete(grouped("e", 1, "g")));
        assert!(cache.state.read().unwrap().objects.by_group.is_empty(), "an emptied group is dropped");
    }

    #[test]
    fn a_group_down_to_one_member_holds_it_without_a_list() {
        let (cache, mut writer) = cache::<Object>();
        for name in ["a", "b", "c", "d"] {
            writer.apply(Event::Apply(grouped(name, 1, "g")));
        }
        let lists = |cache: &Cache<Object>| {
            let state = cache.state.read().unwrap();
            state.objects.by_group.iter().map(|group| matches!(group, Group::Many(_))).collect::<Vec<bool>>()
        };
        writer.apply(Event::Delete(grouped("a", 1, "g")));
        assert_eq!(group(&cache, "g"), [("b".into(), 1), ("c".into(), 1), ("d".into(), 1)]);
        writer.apply(Event::Delete(grouped("b", 1, "g")));
        assert_eq!(lists(&cache), [true]);
        writer.apply(Event::Delete(grouped("c", 1, "g")));
        assert_eq!(group(&cache, "g"), [("d".into(), 1)]);
        assert_eq!(lists(&cache), [false], "one member left: no list");
    }

    #[test]
    fn thousands_of_objects_are_each_found_by_their_own_name_and_group() {
        let (cache, mut writer) = cache::<Object>();
        let count = 4096;
        for i in 0..count {
            writer.apply(Event::Apply(grouped(&format!("csr-{i}"), i, &format!("node-{}", i / 2))));
        }
        for i in 0..count {
            assert_eq!(cache.get(&format!("csr-{i}")).map(|o| o.1), Some(i), "csr-{i}");
        }
        for node in 0..count / 2 {
            let expected = [(format!("csr-{}", 2 * node), 2 * node), (format!("csr-{}", 2 * node + 1), 2 * node + 1)];
            let mut members = group(&cache, &format!("node-{node}"));
            members.sort_by_key(|member| member.1);
            assert_eq!(members, expected, "node-{node}");
        }
        assert_eq!(cache.state().len(), count as usize);
    }

    fn versions(cache: &Cache<Object>) -> Vec<(String, u32)> {
        let mut objects: Vec<(String, u32)> = cache.state().iter().map(|o| (o.0.to_string(), o.1)).collect();
        objects.sort();
        objects
    }

    #[test]
    fn live_events_add_replace_and_remove_by_name() {
        let (cache, mut writer) = cache::<Object>();
        writer.apply(Event::Apply(object("a", 1)));
        writer.apply(Event::Apply(object("b", 1)));
        writer.apply(Event::Apply(object("a", 2)));
        assert_eq!(versions(&cache), [("a".into(), 2), ("b".into(), 1)]);
        assert_eq!(cache.get("a").map(|o| o.1), Some(2));
        writer.apply(Event::Delete(object("a", 3)));
        assert_eq!(versions(&cache), [("b".into(), 1)]);
        assert!(cache.get("a").is_none());
    }

    #[test]
    fn a_list_replaces_the_cache_only_when_it_completes() {
        let (cache, mut writer) = cache::<Object>();
        assert!(!cache.is_ready());
        writer.apply(Event::Apply(object("old", 1)));
        writer.apply(Event::<Object>::Init);
        writer.apply(Event::InitApply(object("new", 1)));
        assert_eq!(versions(&cache), [("old".into(), 1)], "a list under way is not seen");
        assert!(!cache.is_ready());
        writer.apply(Event::<Object>::InitDone);
        assert_eq!(versions(&cache), [("new".into(), 1)], "what the list did not hold is gone");
        assert!(cache.is_ready());
        // An empty relist empties the cache.
        writer.apply(Event::<Object>::Init);
        writer.apply(Event::<Object>::InitDone);
        assert!(cache.state().is_empty());
        assert!(cache.is_ready());
    }

    #[test]
    fn its_size_counts_what_it_holds_or_the_larger_list_under_way() {
        let (_, mut writer) = cache::<Object>();
        assert_eq!(writer.size(), 0);
        writer.apply(Event::<Object>::Init);
        for (listed, name) in ["a", "b", "c"].into_iter().enumerate() {
            writer.apply(Event::InitApply(object(name, 1)));
            assert_eq!(writer.size(), listed + 1, "a first list counts as it comes");
        }
        writer.apply(Event::<Object>::InitDone);
        assert_eq!(writer.size(), 3);
        writer.apply(Event::Apply(object("d", 1)));
        writer.apply(Event::Apply(object("a", 2)));
        assert_eq!(writer.size(), 4, "a new object counts, a changed one does not count twice");
        writer.apply(Event::Delete(object("b", 1)));
        assert_eq!(writer.size(), 3);
        writer.apply(Event::<Object>::Init);
        writer.apply(Event::InitApply(object("a", 2)));
        assert_eq!(writer.size(), 3, "a relist shorter than the cache so far counts the cache");
        for name in ["b", "c", "e", "f"] {
            writer.apply(Event::InitApply(object(name, 1)));
        }
        assert_eq!(writer.size(), 5, "and a longer one itself");
        writer.apply(Event::<Object>::InitDone);
        assert_eq!(writer.size(), 5);
    }

    #[test]
    fn its_weight_sums_what_it_holds_or_the_heavier_list_under_way() {
        let (cache, mut writer) = cache::<Object>();
        assert_eq!(writer.weight(), 0);
        writer.apply(Event::Apply(object("a", 3)));
        writer.apply(Event::Apply(grouped("b", 5, "g")));
        assert_eq!(writer.weight(), 8);
        writer.apply(Event::Apply(object("a", 1)));
        assert_eq!(writer.weight(), 6, "a changed object counts as it is now");
        writer.apply(Event::Delete(grouped("b", 5, "g")));
        assert_eq!(writer.weight(), 1, "a deleted one no more");
        writer.apply(Event::<Object>::Init);
        writer.apply(Event::InitApply(object("c", 1)));
        assert_eq!(writer.weight(), 1, "a relist lighter than the cache so far counts the cache");
        writer.apply(Event::InitApply(object("d", 4)));
        assert_eq!(writer.weight(), 5, "and a heavier one itself");
        writer.apply(Event::<Object>::InitDone);
        assert_eq!(writer.weight(), 5);
        writer.apply(Event::<Object>::Init);
        assert_eq!(writer.weight(), 5, "a new list starts from nothing");
        writer.apply(Event::InitApply(object("e", 2)));
        writer.apply(Event::<Object>::InitDone);
        assert_eq!((writer.weight(), versions(&cache)), (2, vec![("e".into(), 2)]));
    }

    #[test]
    fn an_object_is_replaced_only_while_the_cache_holds_it_itself() {
        let (cache, mut writer) = cache::<Object>();
        writer.apply(Event::Apply(grouped("a", 4, "g")));
        writer.apply(Event::Apply(object("b", 2)));
        let a = cache.get("a").unwrap();
        assert!(cache.replace(&a, grouped("a", 1, "g")));
        assert_eq!((cache.get("a").map(|o| o.1), writer.weight()), (Some(1), 3), "replaced, and weighed as it is now");
        assert_eq!(group(&cache, "g"), [("a".into(), 1)], "in its group too, once");
        assert!(!cache.replace(&a, grouped("a", 7, "g")), "no longer the cached one");
        let b = cache.get("b").unwrap();
        writer.apply(Event::Apply(object("b", 3)));
        assert!(!cache.replace(&b, object("b", 0)), "the watch brought a newer version");
        writer.apply(Event::Delete(object("b", 3)));
        assert!(!cache.replace(&b, object("b", 0)) && cache.get("b").is_none(), "a deleted object stays deleted");
        assert_eq!(writer.weight(), 1);
    }

    #[test]
    fn a_relist_shares_every_unchanged_object_with_the_cache_and_copies_only_what_changed() {
        let (cache, mut writer) = cache::<Object>();
        writer.apply(Event::<Object>::Init);
        for name in ["a", "b", "c"] {
            writer.apply(Event::InitApply(object(name, 1)));
        }
        writer.apply(Event::<Object>::InitDone);
        let before: Vec<Arc<Object>> = ["a", "b", "c"].map(|name| cache.get(name).unwrap()).into();
        writer.apply(Event::<Object>::Init);
        let Event::InitApply(a) = writer.apply(Event::InitApply(object("a", 1))) else { panic!("not an init apply") };
        writer.apply(Event::InitApply(object("b", 2)));
        assert!(Arc::ptr_eq(&a, &before[0]), "an unchanged object is the cached one while the relist runs");
        writer.apply(Event::InitApply(object("c", 1)));
        writer.apply(Event::<Object>::InitDone);
        let after: Vec<Arc<Object>> = ["a", "b", "c"].map(|name| cache.get(name).unwrap()).into();
        assert!(Arc::ptr_eq(&after[0], &before[0]) && Arc::ptr_eq(&after[2], &before[2]), "held once");
        assert!(!Arc::ptr_eq(&after[1], &before[1]), "a changed object is the new one");
        assert_eq!(versions(&cache), [("a".into(), 1), ("b".into(), 2), ("c".into(), 1)]);
        // The cache, `before` and `after` hold `a`, and the event handed back; nothing else does.
        drop(a);
        assert_eq!(Arc::strong_count(&before[0]), 3);
        // A live event of an unchanged object is the cached one too.
        let Event::Apply(c) = writer.apply(Event::Apply(object("c", 1))) else { panic!("not an apply") };
        assert!(Arc::ptr_eq(&c, &before[2]));
    }

    #[test]
    fn a_completed_relist_drops_what_vanished_keeps_what_stayed_and_updates_what_changed_in_both_sets() {
        let (cache, mut writer) = cache::<Object>();
        for (name, group) in [("stays", "g"), ("changes", "g"), ("vanishes", "g"), ("moves", "h"), ("alone", "v")] {
            writer.apply(Event::Apply(grouped(name, 1, group)));
        }
        writer.apply(Event::<Object>::Init);
        for object in [
            grouped("stays", 1, "g"),
            grouped("changes", 2, "g"),
            grouped("moves", 1, "g"),
            grouped("new", 1, "h"),
            grouped("twice", 1, "h"),
            grouped("twice", 2, "h"),
        ] {
            writer.apply(Event::InitApply(object));
        }
        assert_eq!(group(&cache, "v"), [("alone".into(), 1)], "the old sets answer until the list completes");
        writer.apply(Event::<Object>::InitDone);
        let expected = [("changes", 2), ("moves", 1), ("new", 1), ("stays", 1), ("twice", 2)];
        assert_eq!(versions(&cache), expected.map(|(name, version)| (name.to_owned(), version)));
        assert_eq!(group(&cache, "g"), [("changes".into(), 2), ("moves".into(), 1), ("stays".into(), 1)]);
        assert_eq!(group(&cache, "h"), [("new".into(), 1), ("twice".into(), 2)], "listed twice: the later one");
        assert!(group(&cache, "v").is_empty() && cache.get("vanishes").is_none() && cache.get("alone").is_none());
        assert!(cache.state.read().unwrap().listing.is_none(), "nothing of the list is held beside the cache");
    }

    #[test]
    fn the_members_of_a_group_share_one_copy_of_its_text() {
        let (cache, mut writer) = cache::<Object>();
        for name in ["a", "b"] {
            writer.apply(Event::Apply(grouped(name, 1, "g")));
        }
        writer.apply(Event::<Object>::Init);
        writer.apply(Event::InitApply(grouped("c", 1, "g")));
        writer.apply(Event::<Object>::InitDone);
        writer.apply(Event::Apply(grouped("d", 1, "g")));
        writer.apply(Event::Apply(grouped("e", 1, "h")));
        let group_of = |name: &str| cache.get(name).and_then(|object| object.2.clone()).unwrap();
        assert!(Arc::ptr_eq(&group_of("c"), &group_of("d")), "one copy");
        assert_eq!((&*group_of("d"), &*group_of("e")), ("g", "h"));
        assert_eq!(group(&cache, "g"), [("c".into(), 1), ("d".into(), 1)]);
    }

    #[test]
    fn the_event_handed_back_shares_the_cached_object() {
        let (cache, mut writer) = cache::<Object>();
        let Event::Apply(applied) = writer.apply(Event::<Object>::Apply(object("a", 1))) else {
            panic!("not an apply")
        };
        let cached = cache.get("a").unwrap();
        assert!(Arc::ptr_eq(&cached, &applied));
    }
}
