"""Generates corpus.txt, the demo's small English-like training text (run once; output is shipped)."""
import random
from pathlib import Path

# A tiny grammar: enough regularity (word spelling, agreement, punctuation, recurring phrases) for a
# character model to learn in a minute, enough variety that it cannot just memorise one sentence.
SUBJECTS = ["the old fisherman", "a young baker", "the tired farmer", "my little sister", "the quiet teacher",
            "a clever fox", "the grey cat", "our neighbour", "the brave sailor", "a small bird",
            "the kind doctor", "the king", "a lonely wolf", "the miller", "her brother"]
VERBS = ["walked", "ran", "sailed", "looked", "waited", "sang", "listened", "wandered", "hurried", "smiled"]
PREPS = ["to", "across", "along", "near", "behind", "towards", "around", "past"]
PLACES = ["the harbour", "the green hill", "the river", "the old mill", "the market", "the dark forest",
          "the village square", "the garden", "the stone bridge", "the quiet lake", "the bakery", "the castle"]
TIMES = ["at dawn", "in the morning", "before noon", "after dinner", "at night", "in the spring",
         "every sunday", "in the rain", "at sunset", "on a cold day"]
OBJECTS = ["a basket of bread", "three red apples", "an old map", "a letter", "some warm milk",
           "a wooden boat", "a bunch of flowers", "a heavy stone", "a silver key", "a loaf of rye"]
TAKES = ["carried", "found", "bought", "lost", "gave away", "painted", "hid", "mended"]
FEELINGS = ["happy", "tired", "hungry", "calm", "curious", "cold", "proud", "sleepy"]
SAYS = ["said", "asked", "whispered", "called", "replied"]
LINES = ["the sea is wide and the sky is blue", "bread is best when it is warm", "the road is long",
         "we will meet again by the river", "the wind knows the way home", "count the stars and sleep"]


def cap(s):
    return s[0].upper() + s[1:]


def sentence(r):
    kind = r.randrange(6)
    s = r.choice(SUBJECTS)
    if kind == 0:
        return f"{cap(s)} {r.choice(VERBS)} {r.choice(PREPS)} {r.choice(PLACES)} {r.choice(TIMES)}."
    if kind == 1:
        return f"{cap(s)} {r.choice(TAKES)} {r.choice(OBJECTS)} {r.choice(PREPS)} {r.choice(PLACES)}."
    if kind == 2:
        return f"{cap(r.choice(TIMES))}, {s} felt {r.choice(FEELINGS)} and {r.choice(VERBS)} home."
    if kind == 3:
        return f'"{cap(r.choice(LINES))}," {r.choice(SAYS)} {s}.'
    if kind == 4:
        o = r.choice(SUBJECTS)
        return f"{cap(s)} and {o} {r.choice(VERBS)} {r.choice(PREPS)} {r.choice(PLACES)} together."
    return f"When {s} {r.choice(VERBS)} {r.choice(PREPS)} {r.choice(PLACES)}, it was {r.choice(TIMES)}."


def main(n_lines=500, seed=1234):
    r = random.Random(seed)
    lines = [" ".join(sentence(r) for _ in range(r.randint(1, 2))) for _ in range(n_lines)]
    out = Path(__file__).with_name("corpus.txt")
    out.write_text("\n".join(lines) + "\n")
    return out


if __name__ == "__main__":
    print(main())
