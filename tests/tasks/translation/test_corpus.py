"""The generated English → German corpus: grammar on hand-built sentences, splits, determinism, validation."""

import pytest

from tasks.translation.corpus import (
    DIFFICULTIES,
    Clause,
    CorpusConfig,
    NounPhrase,
    PrepositionalPhrase,
    Subordinate,
    generate_corpus,
    realise,
    source_words,
)

SMALL = dict(n_train=400, n_valid=50, n_test=50, n_long=40)


def NP(noun, *adjectives, **kwargs):
    return NounPhrase(noun, adjectives=adjectives, **kwargs)


def with_pp(preposition, np, head="woman"):
    """``head`` with a prepositional phrase, as the subject of "sleeps"."""
    return Clause(NP(head, prepositional=PrepositionalPhrase(preposition, np)), "sleep")


GRAMMAR = {
    "weak adjective": (
        Clause(NP("dog", "big"), "see", NP("cat")),
        "the big dog sees the cat .",
        "der große Hund sieht die Katze .",
    ),
    "accusative masculine": (
        Clause(NP("cat"), "see", NP("dog", "big")),
        "the cat sees the big dog .",
        "die Katze sieht den großen Hund .",
    ),
    "mixed declension after ein": (
        Clause(NP("man", "old", definite=False), "read", NP("book", "new", definite=False)),
        "an old man reads a new book .",
        "ein alter Mann liest ein neues Buch .",
    ),
    "adjective ending in e": (
        Clause(NP("dog", "tired", definite=False), "see", NP("cat", "tired")),
        "a tired dog sees the tired cat .",
        "ein müder Hund sieht die müde Katze .",
    ),
    "irregular plurals": (
        Clause(NP("man", plural=True), "see", NP("mouse", "small", plural=True, definite=False)),
        "the men see small mice .",
        "die Männer sehen kleine Mäuse .",
    ),
    "dative verb": (
        Clause("I", "help", NP("child")),
        "I help the child .",
        "ich helfe dem Kind .",
    ),
    "person agreement, strong stem": (
        Clause("you", "read", NP("book", plural=True)),
        "you read the books .",
        "du liest die Bücher .",
    ),
    "dative after mit": (
        with_pp("with", NP("dog")),
        "the woman with the dog sleeps .",
        "die Frau mit dem Hund schläft .",
    ),
    "dative plural -n": (
        with_pp("with", NP("child", "small", plural=True, definite=False)),
        "the woman with small children sleeps .",
        "die Frau mit kleinen Kindern schläft .",
    ),
    "accusative after für": (
        with_pp("for", NP("man", definite=False)),
        "the woman for a man sleeps .",
        "die Frau für einen Mann schläft .",
    ),
    "contraction im": (
        with_pp("in", NP("house")),
        "the woman in the house sleeps .",
        "die Frau im Haus schläft .",
    ),
    "contraction zur": (
        with_pp("to", NP("school")),
        "the woman to the school sleeps .",
        "die Frau zur Schule schläft .",
    ),
    "verb-final subordinate clause": (
        Clause(NP("cat"), "sleep", subordinate=Subordinate("because", Clause(NP("dog"), "see", NP("ball")))),
        "the cat sleeps because the dog sees the ball .",
        "die Katze schläft , weil der Hund den Ball sieht .",
    ),
    "relative clause, subject gap": (
        Clause(NP("dog", relative=Clause(None, "see", NP("cat"))), "sleep"),
        "the dog that sees the cat sleeps .",
        "der Hund , der die Katze sieht , schläft .",
    ),
    "relative clause, accusative gap": (
        Clause(NP("man"), "see", NP("ball", relative=Clause("I", "find"))),
        "the man sees the ball that I find .",
        "der Mann sieht den Ball , den ich finde .",
    ),
    "relative pronoun denen": (
        Clause(NP("child", plural=True, relative=Clause(NP("man"), "help")), "laugh"),
        "the children that the man helps laugh .",
        "die Kinder , denen der Mann hilft , lachen .",
    ),
    "nested relative clauses": (
        Clause(NP("woman", relative=Clause(None, "see", NP("dog", relative=Clause(None, "sleep")))), "run"),
        "the woman that sees the dog that sleeps runs .",
        "die Frau , die den Hund , der schläft , sieht , läuft .",
    ),
}


@pytest.mark.parametrize("case", GRAMMAR, ids=list(GRAMMAR))
def test_grammar_on_hand_built_sentences(case):
    sentence, english, german = GRAMMAR[case]
    assert realise(sentence) == (english, german)


def test_realise_rejects_malformed_structures():
    with pytest.raises(ValueError, match="takes no object"):
        realise(Clause(NP("dog"), "sleep", NP("cat")))
    with pytest.raises(ValueError, match="needs an object"):
        realise(Clause(NP("dog"), "see"))
    with pytest.raises(ValueError, match="gap"):
        realise(Clause(NP("dog", relative=Clause(NP("cat"), "see", NP("ball"))), "sleep"))
    with pytest.raises(ValueError, match="Did you mean 'dog'"):
        realise(Clause(NP("dgo"), "sleep"))


def test_same_seed_same_corpus_and_different_seed_different():
    first = generate_corpus(seed=3, **SMALL)
    assert generate_corpus(CorpusConfig(seed=3, **SMALL)) == first
    assert generate_corpus(seed=4, **SMALL) != first


@pytest.mark.parametrize("difficulty", list(DIFFICULTIES))
def test_each_difficulty_gives_disjoint_splits_and_a_longer_test_long(difficulty):
    config = CorpusConfig(difficulty=difficulty, **SMALL)
    corpus = generate_corpus(config)
    assert {name: len(pairs) for name, pairs in corpus.items()} == {
        "train": 400,
        "valid": 50,
        "test": 50,
        "test_long": 40,
    }
    sources = [en for pairs in corpus.values() for en, _ in pairs]
    assert len(set(sources)) == len(sources)  # no sentence twice, within or across splits
    for en, de in (pair for pairs in corpus.values() for pair in pairs):
        assert en.endswith(" .") and de.endswith(" .")
    longest_train = max(source_words(en) for en, _ in corpus["train"])
    long_lengths = [source_words(en) for en, _ in corpus["test_long"]]
    assert longest_train <= config.train_max_words
    assert min(long_lengths) > longest_train
    assert config.long_min_words <= min(long_lengths) and max(long_lengths) <= config.long_max_words


def test_harder_settings_use_the_harder_grammar():
    german = " ".join(de for pairs in generate_corpus(difficulty="hard", **SMALL).values() for _, de in pairs)
    for word in (" weil ", " , die ", " denen ", " mit ", " im "):
        assert word in german
    easy = " ".join(de for pairs in generate_corpus(**SMALL).values() for _, de in pairs)
    assert "," not in easy


def test_default_sizes_come_from_the_preset():
    corpus = generate_corpus()
    easy = DIFFICULTIES["easy"]
    assert [len(corpus[s]) for s in ("train", "valid", "test", "test_long")] == [
        easy["n_train"],
        easy["n_valid"],
        easy["n_test"],
        easy["n_long"],
    ]


def test_knobs_not_given_follow_the_difficulty():
    config = CorpusConfig(n_train=10, p_relative=0.9)
    assert config.p_subordinate == DIFFICULTIES["easy"]["p_subordinate"]
    hard = config.updated(difficulty="hard")
    assert (hard.n_train, hard.p_relative) == (10, 0.9)
    assert hard.p_subordinate == DIFFICULTIES["hard"]["p_subordinate"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (dict(p_relative=1.5), r"p_relative must be in \[0.0, 1.0\], got 1.5"),
        (dict(n_train=0), r"n_train must be in \[1, "),
        (dict(n_nouns=1000), r"n_nouns must be in \[1, \d+\], got 1000"),
        (dict(max_depth=-1), r"max_depth must be in \[0, 5\]"),
        (dict(max_adjectives=5, n_adjectives=2), r"max_adjectives must be <= n_adjectives \(2\)"),
        (dict(train_max_words=10, long_min_words=10), r"long_min_words must be > train_max_words \(10\)"),
        (dict(long_min_words=20, long_max_words=15), r"long_max_words must be >= long_min_words \(20\)"),
        (dict(difficulty="hrad"), r"unknown difficulty 'hrad'\. Did you mean 'hard'\?"),
    ],
)
def test_bad_config_values_raise_clear_errors(overrides, message):
    with pytest.raises(ValueError, match=message):
        CorpusConfig(**overrides)


def test_bad_types_and_unknown_fields():
    with pytest.raises(TypeError, match="n_train must be an int"):
        CorpusConfig(n_train=10.5)
    with pytest.raises(TypeError, match="seed must be an int"):
        CorpusConfig(seed="0")
    with pytest.raises(ValueError, match="Did you mean 'n_train'"):
        generate_corpus(n_trian=5)


def test_a_grammar_too_small_for_the_sizes_says_so():
    tiny = dict(n_nouns=1, n_adjectives=1, n_verbs=1, max_adjectives=0, p_pronoun=0.0)
    with pytest.raises(ValueError, match="distinct sentences"):
        generate_corpus(n_train=500, n_valid=0, n_test=0, n_long=0, **tiny)
