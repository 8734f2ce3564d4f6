"""The embedded default translation corpus: English → German from a small generative grammar.

``zoo train translation`` trains on this when no data is given, so a run works offline and its difficulty
is a dial rather than an accident of a download. Everything is drawn from ``random.Random(seed)``: the same
config gives the same corpus on every machine.

Grammar
-------
::

    sentence     := clause (conjunction clause)*         because/weil, although/obwohl, when/wenn, while/während
    clause       := subject verb [object]                each verb takes no object, an accusative or a dative one
    subject      := pronoun | noun-phrase                I/ich, you/du, he/er, she/sie, it/es, we/wir, they/sie
    noun-phrase  := [article] adjective* noun [preposition simple-noun-phrase] ["that" clause-with-a-gap]

German realises it with:

- gendered nouns and articles by case: der/den/dem, die/die/der, das/das/dem, plural die/die/den with the
  dative plural -n (mit den Hunden); ein/einen/einem, eine/eine/einer; "a" in the plural is no article.
- adjective endings by declension: weak after der (der große Hund, den großen Hund), mixed after ein
  (ein großer Hund, ein großes Buch), strong with no article (große Hunde, mit großen Hunden).
- irregular plurals from the lexicon on both sides (Mann → Männer, Maus → Mäuse; man → men, mouse → mice).
- verbs agreeing in person and number, strong stems included (ich sehe, du siehst, er sieht, wir sehen).
- verb second in main clauses, verb final in subordinate and relative clauses (…, weil der Hund den Ball sieht).
- prepositions governing the dative (mit, von, zu, in, auf, unter, hinter) or the accusative (für, ohne),
  with the contractions im, vom, zum, zur.
- relative pronouns agreeing with their noun in gender and number and taking their case from the gap
  (der Hund, der die Katze sieht / der Ball, den ich sehe / die Kinder, denen der Mann hilft).

Subjects, and objects of dative verbs (help, follow, thank, answer), are animate nouns or pronouns, so most
sentences make sense. The grammar is built so that the English decides the German (a verb's valency is fixed, a
noun takes at most one prepositional phrase and one relative clause, and the noun inside a prepositional phrase
takes neither), and generation checks that no English sentence ever meets two German ones: a perfect model can
reach BLEU 100.

Tokens
------
Words and punctuation are separated by single spaces, so a word-level tokenizer needs no rules:
``"der Hund , der die Katze sieht , schläft ."``. Nothing is lowercased beyond German usage (nouns keep their
capital, sentences start lower case); "you" is always the singular "du"; the English has no commas, the German
has them where German needs them. A sentence's length is its number of source (English) words, punctuation
not counted: :func:`source_words`.

Knobs and splits
----------------
:class:`CorpusConfig` holds the split sizes and the knobs (vocabulary sizes, how often each optional part
appears, how deep clauses nest, the length limits); :data:`DIFFICULTIES` names three presets. ``easy`` is short
subject–verb–object sentences with adjectives, plurals and pronouns, which a small model learns almost
perfectly; ``medium`` and ``hard`` add prepositional phrases, relative and subordinate clauses, nesting and a
larger vocabulary, so they separate good variants from bad ones.

``train``, ``valid`` and ``test`` are drawn from one distribution, capped at ``train_max_words``, and share no
sentence. ``test_long`` holds sentences of ``long_min_words``..``long_max_words`` words, strictly longer than every
training sentence: it measures length generalisation, which position schemes differ on most and which
in-distribution test sets cannot show. It is drawn from the same grammar and knobs, with the optional parts made
likelier, so it holds no construction that training lacks, only more of them.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field, fields

from plumbing.errors import unknown_name

# ---------------------------------------------------------------- lexicon


@dataclass(frozen=True)
class Noun:
    en: str
    en_plural: str
    de: str
    de_plural: str
    gender: str  # "m", "f" or "n"
    animate: bool  # only animate nouns are subjects, and objects of dative verbs


@dataclass(frozen=True)
class Verb:
    en: str
    en_third: str  # he/she/it form: sees
    de: dict[tuple[int, bool], str]  # (person, plural) → form; "you" is always the singular du
    case: str | None  # the object's case: "acc", "dat", or None for no object


def _add_s(word: str) -> str:
    """English plural and third person singular: dog → dogs, box → boxes, city → cities, watch → watches."""
    if word.endswith(("s", "x", "ch", "sh")):
        return word + "es"
    if word.endswith("y") and word[-2] not in "aeiou":
        return word[:-1] + "ies"
    return word + "s"


def _noun(en: str, de: str, de_plural: str, gender: str, animate: bool = False, en_plural: str = "") -> Noun:
    return Noun(en, en_plural or _add_s(en), de, de_plural, gender, animate)


def _verb(en: str, de: str, case: str | None, du: str = "", er: str = "") -> Verb:
    """A verb; ``du``/``er`` are given only where the stem changes (sehen: siehst, sieht)."""
    stem = de[:-2]
    linking = "e" if stem.endswith(("t", "d")) else ""  # du findest, er findet
    du = du or stem + linking + ("t" if stem.endswith(("s", "ß", "z", "x")) else "st")  # du tanzt
    er = er or stem + linking + "t"
    forms = {(1, False): stem + "e", (2, False): du, (3, False): er, (1, True): de, (3, True): de}
    return Verb(en, _add_s(en), forms, case)


# Knobs take the first n entries of each table, so the order matters: the early nouns mix genders, animacy and
# irregular plurals; the first verb is transitive (every vocabulary can build a relative clause); dative verbs
# come after the first ten (easy has none).
NOUNS: dict[str, Noun] = {n.en: n for n in (
    _noun("dog", "Hund", "Hunde", "m", animate=True),
    _noun("cat", "Katze", "Katzen", "f", animate=True),
    _noun("child", "Kind", "Kinder", "n", animate=True, en_plural="children"),
    _noun("ball", "Ball", "Bälle", "m"),
    _noun("book", "Buch", "Bücher", "n"),
    _noun("woman", "Frau", "Frauen", "f", animate=True, en_plural="women"),
    _noun("man", "Mann", "Männer", "m", animate=True, en_plural="men"),
    _noun("house", "Haus", "Häuser", "n"),
    _noun("apple", "Apfel", "Äpfel", "m"),
    _noun("door", "Tür", "Türen", "f"),
    _noun("mouse", "Maus", "Mäuse", "f", animate=True, en_plural="mice"),
    _noun("girl", "Mädchen", "Mädchen", "n", animate=True),
    _noun("table", "Tisch", "Tische", "m"),
    _noun("flower", "Blume", "Blumen", "f"),
    _noun("bird", "Vogel", "Vögel", "m", animate=True),
    _noun("car", "Auto", "Autos", "n"),
    _noun("teacher", "Lehrer", "Lehrer", "m", animate=True),
    _noun("lamp", "Lampe", "Lampen", "f"),
    _noun("horse", "Pferd", "Pferde", "n", animate=True),
    _noun("tree", "Baum", "Bäume", "m"),
    _noun("mother", "Mutter", "Mütter", "f", animate=True),
    _noun("father", "Vater", "Väter", "m", animate=True),
    _noun("picture", "Bild", "Bilder", "n"),
    _noun("bottle", "Flasche", "Flaschen", "f"),
    _noun("friend", "Freund", "Freunde", "m", animate=True),
    _noun("cow", "Kuh", "Kühe", "f", animate=True),
    _noun("egg", "Ei", "Eier", "n"),
    _noun("chair", "Stuhl", "Stühle", "m"),
    _noun("city", "Stadt", "Städte", "f"),
    _noun("window", "Fenster", "Fenster", "n"),
    _noun("king", "König", "Könige", "m", animate=True),
    _noun("goose", "Gans", "Gänse", "f", animate=True, en_plural="geese"),
    _noun("bed", "Bett", "Betten", "n"),
    _noun("hat", "Hut", "Hüte", "m"),
    _noun("sister", "Schwester", "Schwestern", "f", animate=True),
    _noun("pig", "Schwein", "Schweine", "n", animate=True),
    _noun("brother", "Bruder", "Brüder", "m", animate=True),
    _noun("cup", "Tasse", "Tassen", "f"),
    _noun("glass", "Glas", "Gläser", "n"),
    _noun("garden", "Garten", "Gärten", "m"),
    _noun("daughter", "Tochter", "Töchter", "f", animate=True),
    _noun("boat", "Boot", "Boote", "n"),
    _noun("key", "Schlüssel", "Schlüssel", "m"),
    _noun("street", "Straße", "Straßen", "f"),
    _noun("village", "Dorf", "Dörfer", "n"),
    _noun("fox", "Fuchs", "Füchse", "m", animate=True),
    _noun("school", "Schule", "Schulen", "f"),
    _noun("song", "Lied", "Lieder", "n"),
    _noun("wolf", "Wolf", "Wölfe", "m", animate=True, en_plural="wolves"),
    _noun("wall", "Wand", "Wände", "f"),
    _noun("lamb", "Lamm", "Lämmer", "n", animate=True),
    _noun("letter", "Brief", "Briefe", "m"),
    _noun("box", "Kiste", "Kisten", "f"),
    _noun("room", "Zimmer", "Zimmer", "n"),
    _noun("cook", "Koch", "Köche", "m", animate=True),
    _noun("foot", "Fuß", "Füße", "m", en_plural="feet"),
)}  # fmt: skip

ADJECTIVES: dict[str, str] = {
    "big": "groß", "small": "klein", "old": "alt", "young": "jung", "red": "rot", "black": "schwarz",
    "happy": "froh", "tired": "müde", "new": "neu", "good": "gut", "green": "grün", "blue": "blau",
    "white": "weiß", "beautiful": "schön", "fast": "schnell", "sad": "traurig", "hungry": "hungrig",
    "clever": "klug", "brave": "mutig", "lazy": "faul", "strong": "stark", "cold": "kalt", "poor": "arm",
    "rich": "reich", "friendly": "freundlich", "yellow": "gelb",
}  # fmt: skip

VERBS: dict[str, Verb] = {v.en: v for v in (
    _verb("see", "sehen", "acc", du="siehst", er="sieht"),
    _verb("sleep", "schlafen", None, du="schläfst", er="schläft"),
    _verb("love", "lieben", "acc"),
    _verb("run", "laufen", None, du="läufst", er="läuft"),
    _verb("find", "finden", "acc"),
    _verb("read", "lesen", "acc", du="liest", er="liest"),
    _verb("eat", "essen", "acc", du="isst", er="isst"),
    _verb("sing", "singen", None),
    _verb("carry", "tragen", "acc", du="trägst", er="trägt"),
    _verb("laugh", "lachen", None),
    _verb("help", "helfen", "dat", du="hilfst", er="hilft"),
    _verb("buy", "kaufen", "acc"),
    _verb("hear", "hören", "acc"),
    _verb("follow", "folgen", "dat"),
    _verb("wait", "warten", None),
    _verb("hold", "halten", "acc", du="hältst", er="hält"),
    _verb("swim", "schwimmen", None),
    _verb("thank", "danken", "dat"),
    _verb("wash", "waschen", "acc", du="wäschst", er="wäscht"),
    _verb("visit", "besuchen", "acc"),
    _verb("play", "spielen", None),
    _verb("answer", "antworten", "dat"),
    _verb("catch", "fangen", "acc", du="fängst", er="fängt"),
    _verb("dance", "tanzen", None),
    _verb("call", "rufen", "acc"),
)}  # fmt: skip

PREPOSITIONS: dict[str, tuple[str, str]] = {
    "with": ("mit", "dat"), "from": ("von", "dat"), "to": ("zu", "dat"), "for": ("für", "acc"),
    "without": ("ohne", "acc"), "in": ("in", "dat"), "on": ("auf", "dat"), "under": ("unter", "dat"),
    "behind": ("hinter", "dat"),
}  # fmt: skip
PRONOUNS: dict[str, tuple[str, int, bool]] = {  # English → (German, person, plural)
    "I": ("ich", 1, False), "you": ("du", 2, False), "he": ("er", 3, False), "she": ("sie", 3, False),
    "it": ("es", 3, False), "we": ("wir", 1, True), "they": ("sie", 3, True),
}  # fmt: skip
CONJUNCTIONS: dict[str, str] = {"because": "weil", "although": "obwohl", "when": "wenn", "while": "während"}

# case → gender, or "pl" → word
_DEFINITE = {
    "nom": {"m": "der", "f": "die", "n": "das", "pl": "die"},
    "acc": {"m": "den", "f": "die", "n": "das", "pl": "die"},
    "dat": {"m": "dem", "f": "der", "n": "dem", "pl": "den"},
}
_INDEFINITE = {
    "nom": {"m": "ein", "f": "eine", "n": "ein"},
    "acc": {"m": "einen", "f": "eine", "n": "ein"},
    "dat": {"m": "einem", "f": "einer", "n": "einem"},
}
_ADJECTIVE_ENDINGS = {  # declension → case → gender or "pl" → ending
    "weak": {  # after der/die/das
        "nom": {"m": "e", "f": "e", "n": "e", "pl": "en"},
        "acc": {"m": "en", "f": "e", "n": "e", "pl": "en"},
        "dat": {"m": "en", "f": "en", "n": "en", "pl": "en"},
    },
    "mixed": {  # after ein/eine
        "nom": {"m": "er", "f": "e", "n": "es"},
        "acc": {"m": "en", "f": "e", "n": "es"},
        "dat": {"m": "en", "f": "en", "n": "en"},
    },
    "strong": {"nom": {"pl": "e"}, "acc": {"pl": "e"}, "dat": {"pl": "en"}},  # no article: only bare plurals
}
_CONTRACTIONS = {("in", "dem"): "im", ("von", "dem"): "vom", ("zu", "dem"): "zum", ("zu", "der"): "zur"}
_PUNCTUATION = {".", ","}

# ---------------------------------------------------------------- structures and their realisation


@dataclass(frozen=True)
class PrepositionalPhrase:
    preposition: str  # English, a key of PREPOSITIONS
    object: NounPhrase  # takes no prepositional phrase or relative clause of its own


@dataclass(frozen=True)
class NounPhrase:
    noun: str  # English singular, a key of NOUNS
    plural: bool = False
    definite: bool = True  # the/der; otherwise a/ein, or no article in the plural
    adjectives: tuple[str, ...] = ()
    prepositional: PrepositionalPhrase | None = None
    relative: Clause | None = None  # its missing subject (subject None) or object (object None) is this noun


Subject = NounPhrase | str  # a noun phrase or a key of PRONOUNS


@dataclass(frozen=True)
class Subordinate:
    conjunction: str  # English, a key of CONJUNCTIONS
    clause: Clause


@dataclass(frozen=True)
class Clause:
    subject: Subject | None  # None only in a relative clause whose gap is the subject
    verb: str  # English infinitive, a key of VERBS
    object: NounPhrase | None = None  # None for a verb without object, or in a relative clause whose gap it is
    subordinate: Subordinate | None = None


def realise(sentence: Clause) -> tuple[str, str]:
    """The English and German token strings of a main clause, with the final period.

    Raises ValueError for an unknown word or a malformed structure (an object on a verb that takes none,
    a relative clause without a gap).

    >>> realise(Clause(NounPhrase("dog", adjectives=("big",)), "see", NounPhrase("cat")))
    ('the big dog sees the cat .', 'der große Hund sieht die Katze .')
    """
    german = _german_clause(sentence, verb_final=False) + ["."]  # first: it looks every word up
    german = [w for w, after in zip(german, german[1:] + [""]) if not (w == "," and after in _PUNCTUATION)]
    english = _english_clause(sentence) + ["."]
    return " ".join(english), " ".join(german)


def source_words(english: str) -> int:
    """A sentence's length as the corpus counts it: its words, punctuation not counted."""
    return sum(token not in _PUNCTUATION for token in english.split())


def _lookup(table: dict, kind: str, key: str):
    if key not in table:
        raise unknown_name(kind, key, table)
    return table[key]


def _agreement(subject: Subject | None) -> tuple[int, bool]:
    """(person, plural) of a subject, which the verb agrees with."""
    if subject is None:
        raise ValueError("a clause needs a subject, unless it is a relative clause whose gap is the subject")
    if isinstance(subject, str):
        return _lookup(PRONOUNS, "pronoun", subject)[1:]
    return 3, subject.plural


def _relative_case(clause: Clause) -> str:
    """The case of the relative pronoun: that of the gap the clause leaves."""
    if clause.subject is None:
        return "nom"
    case = VERBS[clause.verb].case
    if clause.object is None and case is not None:
        return case
    raise ValueError(f"a relative clause needs a gap (subject or object None), got {clause}")


# ---- English


def _english_np(np: NounPhrase) -> list[str]:
    noun = NOUNS[np.noun]
    words = [*np.adjectives, noun.en_plural if np.plural else noun.en]
    if np.definite:
        words.insert(0, "the")
    elif not np.plural:
        words.insert(0, "an" if words[0][0] in "aeiou" else "a")
    if np.prepositional:
        words += [np.prepositional.preposition, *_english_np(np.prepositional.object)]
    if np.relative:
        words += ["that", *_english_clause(np.relative, head=np)]
    return words


def _english_clause(clause: Clause, head: NounPhrase | None = None) -> list[str]:
    """Subject, verb, object in every clause; ``head`` is the noun a relative clause's subject gap stands for."""
    subject, verb = clause.subject, VERBS[clause.verb]
    words = [] if subject is None else [subject] if isinstance(subject, str) else _english_np(subject)
    words.append(verb.en_third if _agreement(subject or head) == (3, False) else verb.en)
    if clause.object is not None:
        words += _english_np(clause.object)
    if clause.subordinate:
        words += [clause.subordinate.conjunction, *_english_clause(clause.subordinate.clause)]
    return words


# ---- German


def _german_np(np: NounPhrase, case: str) -> list[str]:
    noun = _lookup(NOUNS, "noun", np.noun)
    key = "pl" if np.plural else noun.gender
    if np.definite:
        article, declension = _DEFINITE[case][key], "weak"
    elif np.plural:
        article, declension = "", "strong"
    else:
        article, declension = _INDEFINITE[case][key], "mixed"
    ending = _ADJECTIVE_ENDINGS[declension][case][key]
    words = [article] if article else []
    words += [_inflect(_lookup(ADJECTIVES, "adjective", a), ending) for a in np.adjectives]
    words.append(_german_noun(noun, np.plural, case))
    if np.prepositional:
        words += _german_pp(np.prepositional)
    if np.relative:
        pronoun = _relative_pronoun(key, _relative_case(np.relative))
        words += [",", pronoun, *_german_clause(np.relative, verb_final=True, head=np), ","]
    return words


def _german_noun(noun: Noun, plural: bool, case: str) -> str:
    if not plural:
        return noun.de
    return noun.de_plural + ("n" if case == "dat" and noun.de_plural[-1] not in "ns" else "")  # den Hunden


def _inflect(adjective: str, ending: str) -> str:
    return adjective + (ending[1:] if adjective.endswith("e") else ending)  # müde → müden, not müdeen


def _relative_pronoun(key: str, case: str) -> str:
    return "denen" if (key, case) == ("pl", "dat") else _DEFINITE[case][key]  # otherwise the definite article


def _german_pp(pp: PrepositionalPhrase) -> list[str]:
    preposition, case = _lookup(PREPOSITIONS, "preposition", pp.preposition)
    words = _german_np(pp.object, case)
    contracted = _CONTRACTIONS.get((preposition, words[0])) if pp.object.definite else None
    return [contracted, *words[1:]] if contracted else [preposition, *words]


def _german_clause(clause: Clause, verb_final: bool, head: NounPhrase | None = None) -> list[str]:
    """Verb second (``verb_final=False``, main clauses) or verb final (subordinate and relative clauses)."""
    subject, verb = clause.subject, _lookup(VERBS, "verb", clause.verb)
    if clause.object is not None and verb.case is None:
        raise ValueError(f"the verb {clause.verb!r} takes no object, got {clause.object}")
    if clause.object is None and verb.case is not None and (head is None or subject is None):
        raise ValueError(f"the verb {clause.verb!r} needs an object, unless the object is a relative clause's gap")
    if subject is None:
        words = []
    elif isinstance(subject, str):
        words = [_lookup(PRONOUNS, "pronoun", subject)[0]]
    else:
        words = _german_np(subject, "nom")
    objects = [] if clause.object is None else _german_np(clause.object, verb.case)
    finite = verb.de[_agreement(subject or head)]
    words += [*objects, finite] if verb_final else [finite, *objects]
    if clause.subordinate:
        conjunction = _lookup(CONJUNCTIONS, "conjunction", clause.subordinate.conjunction)
        words += [",", conjunction, *_german_clause(clause.subordinate.clause, verb_final=True)]
    return words


# ---------------------------------------------------------------- configuration

DIFFICULTIES: dict[str, dict] = {
    "easy": dict(  # subject-verb-object, adjectives, plurals, pronouns: a small model learns it almost perfectly
        n_train=10_000, n_valid=500, n_test=1000, n_long=500,
        n_nouns=20, n_adjectives=8, n_verbs=10, max_adjectives=3, p_adjective=0.3,
        p_plural=0.3, p_indefinite=0.3, p_pronoun=0.15,
        p_prepositional=0.0, p_relative=0.0, p_subordinate=0.0, max_depth=0,
        train_max_words=8, long_min_words=9, long_max_words=12,
    ),
    "medium": dict(  # adds prepositional phrases, one level of relative or subordinate clause, dative verbs
        n_train=20_000, n_valid=1000, n_test=1000, n_long=500,
        n_nouns=36, n_adjectives=16, n_verbs=18, max_adjectives=2, p_adjective=0.25,
        p_plural=0.3, p_indefinite=0.3, p_pronoun=0.15,
        p_prepositional=0.2, p_relative=0.2, p_subordinate=0.3, max_depth=1,
        train_max_words=14, long_min_words=15, long_max_words=24,
    ),
    "hard": dict(  # the whole lexicon, clauses nested three deep
        n_train=30_000, n_valid=1000, n_test=1000, n_long=500,
        n_nouns=len(NOUNS), n_adjectives=len(ADJECTIVES), n_verbs=len(VERBS), max_adjectives=3, p_adjective=0.25,
        p_plural=0.3, p_indefinite=0.3, p_pronoun=0.15,
        p_prepositional=0.3, p_relative=0.3, p_subordinate=0.4, max_depth=3,
        train_max_words=20, long_min_words=21, long_max_words=36,
    ),
}  # fmt: skip

_MAX_SENTENCES = 10_000_000
_LIMITS: dict[str, tuple[float, float]] = {  # field → allowed [low, high]; p_* fields are probabilities
    "n_train": (1, _MAX_SENTENCES), "n_valid": (0, _MAX_SENTENCES), "n_test": (0, _MAX_SENTENCES),
    "n_long": (0, _MAX_SENTENCES), "n_nouns": (1, len(NOUNS)), "n_adjectives": (1, len(ADJECTIVES)),
    "n_verbs": (1, len(VERBS)), "max_adjectives": (0, 5), "max_depth": (0, 5),
    "train_max_words": (2, 200), "long_min_words": (3, 400), "long_max_words": (3, 400),
}  # fmt: skip


@dataclass
class CorpusConfig:
    """What to generate. Knobs left as None take the value of the ``difficulty`` preset (see DIFFICULTIES).

    Probabilities are per opportunity: each noun phrase is plural with ``p_plural``, gets a relative clause with
    ``p_relative`` (while clauses nest less than ``max_depth`` deep), and so on.
    """

    difficulty: str = "easy"
    seed: int = 0
    n_train: int | None = None
    n_valid: int | None = None
    n_test: int | None = None
    n_long: int | None = None
    n_nouns: int | None = None  # vocabulary: the first n entries of NOUNS, ADJECTIVES, VERBS
    n_adjectives: int | None = None
    n_verbs: int | None = None
    max_adjectives: int | None = None  # per noun phrase
    p_adjective: float | None = None  # chance of each further adjective, up to max_adjectives
    p_plural: float | None = None
    p_indefinite: float | None = None  # a/ein rather than the/der
    p_pronoun: float | None = None  # a subject is a pronoun rather than a noun phrase
    p_prepositional: float | None = None  # a noun phrase gets "with the ball", "im Haus", ...
    p_relative: float | None = None
    p_subordinate: float | None = None  # a main or subordinate clause is followed by "because ...", ...
    max_depth: int | None = None  # how deep relative and subordinate clauses nest; 0: none at all
    train_max_words: int | None = None  # train, valid and test sentences have at most this many source words
    long_min_words: int | None = None  # test_long sentences have at least this many (> train_max_words) ...
    long_max_words: int | None = None  # ... and at most this many
    _from_preset: frozenset[str] = field(default=frozenset(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.difficulty not in DIFFICULTIES:
            raise unknown_name("difficulty", self.difficulty, DIFFICULTIES)
        preset = DIFFICULTIES[self.difficulty]
        self._from_preset = frozenset(name for name in preset if getattr(self, name) is None)
        for name in self._from_preset:
            setattr(self, name, preset[name])
        self._validate()

    def updated(self, **changes) -> CorpusConfig:
        """A copy with ``changes``; knobs this config took from its preset follow the new ``difficulty``."""
        names = {f.name for f in fields(self) if f.init}
        for name in changes.keys() - names:
            raise unknown_name("CorpusConfig field", name, names)
        explicit = {name: getattr(self, name) for name in names if name not in self._from_preset}
        return CorpusConfig(**{**explicit, **changes})

    def _validate(self) -> None:
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise TypeError(f"CorpusConfig.seed must be an int, got {self.seed!r}")
        for name, (low, high) in _LIMITS.items():
            _check_range(name, getattr(self, name), low, high, integer=True)
        for name in (f.name for f in fields(self) if f.name.startswith("p_")):
            _check_range(name, getattr(self, name), 0.0, 1.0, integer=False)
        if self.max_adjectives > self.n_adjectives:
            raise ValueError(
                f"CorpusConfig.max_adjectives must be <= n_adjectives ({self.n_adjectives}), got {self.max_adjectives}"
            )
        if self.long_min_words <= self.train_max_words:
            raise ValueError(
                f"CorpusConfig.long_min_words must be > train_max_words ({self.train_max_words}) so "
                f"test_long is longer than every training sentence, got {self.long_min_words}"
            )
        if self.long_max_words < self.long_min_words:
            raise ValueError(
                f"CorpusConfig.long_max_words must be >= long_min_words ({self.long_min_words}), "
                f"got {self.long_max_words}"
            )


def _check_range(name: str, value: object, low: float, high: float, integer: bool) -> None:
    kind = "an int" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        raise TypeError(f"CorpusConfig.{name} must be {kind} in [{low}, {high}], got {value!r}")
    if not low <= value <= high:
        raise ValueError(f"CorpusConfig.{name} must be in [{low}, {high}], got {value!r}")


# ---------------------------------------------------------------- sampling


class _Sampler:
    """Draws random sentences from the grammar with a config's knobs.

    ``stretch`` < 1 raises the chance of every optional part that makes a sentence longer (p → p**stretch, so
    a part that never appears still never appears): the long split uses it to find long sentences quickly.
    """

    def __init__(self, config: CorpusConfig, rng: random.Random, stretch: float = 1.0) -> None:
        self.config, self.rng = config, rng
        nouns = list(NOUNS.values())[: config.n_nouns]
        self.nouns = [n.en for n in nouns]
        self.animate = [n.en for n in nouns if n.animate] or self.nouns
        self.adjectives = list(ADJECTIVES)[: config.n_adjectives]
        self.verbs = list(VERBS)[: config.n_verbs]
        self.p_adjective = config.p_adjective**stretch
        self.p_prepositional = config.p_prepositional**stretch
        self.p_relative = config.p_relative**stretch
        self.p_subordinate = config.p_subordinate**stretch

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def clause(self, depth: int = 0) -> Clause:
        verb = self.rng.choice(self.verbs)
        subordinate = None
        if depth < self.config.max_depth and self.chance(self.p_subordinate):
            subordinate = Subordinate(self.rng.choice(list(CONJUNCTIONS)), self.clause(depth + 1))
        return Clause(self.subject(depth), verb, self.object(verb, depth), subordinate)

    def subject(self, depth: int) -> Subject:
        if self.chance(self.config.p_pronoun):
            return self.rng.choice(list(PRONOUNS))
        return self.noun_phrase(self.animate, depth)

    def object(self, verb: str, depth: int) -> NounPhrase | None:
        case = VERBS[verb].case
        return None if case is None else self.noun_phrase(self.animate if case == "dat" else self.nouns, depth)

    def noun_phrase(self, nouns: list[str], depth: int, simple: bool = False) -> NounPhrase:
        """A noun phrase from ``nouns``; a ``simple`` one (inside a prepositional phrase) has no PP or relative."""
        noun = self.rng.choice(nouns)
        count = 0
        while count < self.config.max_adjectives and self.chance(self.p_adjective):
            count += 1
        prepositional = relative = None
        if not simple and self.chance(self.p_prepositional):
            inner = self.noun_phrase(self.nouns, depth, simple=True)
            prepositional = PrepositionalPhrase(self.rng.choice(list(PREPOSITIONS)), inner)
        if not simple and depth < self.config.max_depth and self.chance(self.p_relative):
            relative = self.relative(noun, depth + 1)
        return NounPhrase(
            noun,
            plural=self.chance(self.config.p_plural),
            definite=not self.chance(self.config.p_indefinite),
            adjectives=tuple(self.rng.sample(self.adjectives, count)),
            prepositional=prepositional,
            relative=relative,
        )

    def relative(self, head: str, depth: int) -> Clause:
        """A clause whose gap ``head`` fills: its subject (animate heads only) or its object."""
        animate = NOUNS[head].animate
        if animate and self.chance(0.5):
            verb = self.rng.choice(self.verbs)
            return Clause(None, verb, self.object(verb, depth))
        # VERBS starts with an accusative verb, so this list is never empty
        verbs = [v for v in self.verbs if VERBS[v].case == "acc" or (VERBS[v].case == "dat" and animate)]
        return Clause(self.subject(depth), self.rng.choice(verbs))


# ---------------------------------------------------------------- the corpus


_PATIENCE = 20_000  # draws in a row that find no new sentence before the grammar counts as exhausted


def generate_corpus(config: CorpusConfig | None = None, **overrides) -> dict[str, list[tuple[str, str]]]:
    """The corpus as ``{"train", "valid", "test", "test_long"}`` → list of (English, German) pairs.

    ``overrides`` are CorpusConfig fields, applied to ``config`` (or to the default config):
    ``generate_corpus(difficulty="hard", seed=1)``. No sentence appears twice in the corpus.
    """
    config = CorpusConfig().updated(**overrides) if config is None else config.updated(**overrides)
    rng = random.Random(config.seed)
    seen: dict[str, str] = {}
    n_in_distribution = config.n_test + config.n_valid + config.n_train
    pairs = _draw(_Sampler(config, rng), n_in_distribution, lambda n: n <= config.train_max_words, seen)
    rng.shuffle(pairs)  # earlier draws are the commoner sentences: shuffle so the three splits match
    test, valid, train = pairs[: config.n_test], pairs[config.n_test : -config.n_train], pairs[-config.n_train :]
    long_sampler = _Sampler(config, random.Random(f"{config.seed}/test_long"), stretch=0.5)
    test_long = _draw(long_sampler, config.n_long, lambda n: config.long_min_words <= n <= config.long_max_words, seen)
    longest_train = max(source_words(en) for en, _ in train)
    if test_long and min(source_words(en) for en, _ in test_long) <= longest_train:
        raise RuntimeError(f"a test_long sentence is no longer than the longest train one ({longest_train} words)")
    return {"train": train, "valid": valid, "test": test, "test_long": test_long}


def _draw(sampler: _Sampler, count: int, fits: Callable[[int], bool], seen: dict[str, str]) -> list[tuple[str, str]]:
    """``count`` pairs, unseen so far, whose source length ``fits``; records them in ``seen`` (English → German)."""
    pairs: list[tuple[str, str]] = []
    misses = 0
    while len(pairs) < count:
        english, german = realise(sampler.clause())
        known = seen.get(english)
        if known is not None and known != german:  # the grammar is meant to make the English decide the German
            raise RuntimeError(f"{english!r} has two translations: {known!r} and {german!r}")
        if known is None and fits(source_words(english)):
            seen[english] = german
            pairs.append((english, german))
            misses = 0
        elif (misses := misses + 1) == _PATIENCE:
            raise ValueError(
                f"found only {len(pairs)} of {count} distinct sentences of the wanted length, and no new one in "
                f"{_PATIENCE} draws: ask for fewer sentences, or widen the grammar (n_nouns, n_verbs, "
                f"max_adjectives, train_max_words, ...)"
            )
    return pairs
