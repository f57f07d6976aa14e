#!/usr/bin/env python3
"""Writes the two lm-evaluation-harness datasets under tests/eval/data/.

Nothing is downloaded: every example comes from templates filled by a seeded
`random.Random` (arithmetic, counting, ordering of days / months / letters,
number words, comparisons, opposites and capitals from the small tables
below). Re-running this script rewrites the same bytes.

  loom_mc.jsonl   multiple choice (log-likelihood): question, four choices, answer index
  loom_gen.jsonl  short answers (greedy generation, exact match): question, answer
"""
import json
import pathlib
import random

SEED = 20261203
NUM_MC = 200
NUM_GEN = 64

DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December"]
LETTERS = [chr(c) for c in range(ord("A"), ord("Z") + 1)]
ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
        "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
        "nineteen"]
TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
OPPOSITES = [("hot", "cold"), ("up", "down"), ("big", "small"), ("fast", "slow"), ("open", "closed"),
             ("light", "dark"), ("early", "late"), ("happy", "sad"), ("old", "new"), ("wet", "dry"),
             ("full", "empty"), ("hard", "soft"), ("high", "low"), ("left", "right"), ("win", "lose"),
             ("buy", "sell"), ("push", "pull"), ("strong", "weak"), ("rich", "poor"), ("long", "short")]
CAPITALS = [("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"),
            ("Japan", "Tokyo"), ("China", "Beijing"), ("Russia", "Moscow"), ("Egypt", "Cairo"),
            ("Canada", "Ottawa"), ("Australia", "Canberra"), ("Brazil", "Brasilia"),
            ("India", "New Delhi"), ("Greece", "Athens"), ("Portugal", "Lisbon"),
            ("Norway", "Oslo"), ("Sweden", "Stockholm"), ("Poland", "Warsaw"), ("Austria", "Vienna"),
            ("Ireland", "Dublin"), ("Kenya", "Nairobi"), ("Peru", "Lima"), ("Cuba", "Havana"),
            ("Thailand", "Bangkok"), ("Turkey", "Ankara")]
WORDS = ["apple", "banana", "cherry", "garden", "window", "pencil", "river", "orange", "planet",
         "silver", "yellow", "bottle", "candle", "dragon", "forest", "guitar", "island", "jacket",
         "kitten", "ladder", "marble", "needle", "pepper", "rabbit", "saddle", "tunnel", "violin",
         "wallet", "basket", "castle"]


def number_words(n):
    if n < 20:
        return ONES[n]
    tens, ones = divmod(n, 10)
    return TENS[tens] + ("" if ones == 0 else "-" + ONES[ones])


def four_choices(rng, answer, distractors):
    """The answer and three distinct distractors, shuffled; returns (choices, index)."""
    pool = []
    for d in distractors:
        if d != answer and d not in pool:
            pool.append(d)
    assert len(pool) >= 3, (answer, distractors)
    choices = [answer] + pool[:3]
    rng.shuffle(choices)
    return choices, choices.index(answer)


def next_in(seq, item, step=1):
    return seq[(seq.index(item) + step) % len(seq)]


# Each maker returns (question, answer, distractors).
def mc_addition(rng):
    a, b = rng.randint(10, 89), rng.randint(10, 89)
    s = a + b
    return f"What is {a} + {b}?", str(s), [str(s + 1), str(s - 10), str(s + 10), str(s - 1)]


def mc_subtraction(rng):
    a = rng.randint(30, 99)
    b = rng.randint(10, a - 5)
    d = a - b
    return f"What is {a} - {b}?", str(d), [str(d + 10), str(d - 1), str(d + 1), str(d + 2)]


def mc_multiplication(rng):
    a, b = rng.randint(2, 12), rng.randint(2, 12)
    p = a * b
    return f"What is {a} times {b}?", str(p), [str(p + a), str(p - b), str(p + 1), str(a + b)]


def mc_day_after(rng):
    day = rng.choice(DAYS)
    ans = next_in(DAYS, day)
    return f"Which day comes after {day}?", ans, [next_in(DAYS, day, k) for k in (2, -1, 3, 0)]


def mc_month_before(rng):
    month = rng.choice(MONTHS)
    ans = next_in(MONTHS, month, -1)
    return (f"Which month comes before {month}?", ans,
            [next_in(MONTHS, month, k) for k in (1, -2, 2, 0)])


def mc_letter_after(rng):
    letter = rng.choice(LETTERS[:-3])
    ans = next_in(LETTERS, letter)
    return (f"Which letter comes right after {letter} in the alphabet?", ans,
            [next_in(LETTERS, letter, k) for k in (2, -1, 3)])


def mc_largest(rng):
    nums = rng.sample(range(10, 100), 4)
    q = "Which number is the largest: " + ", ".join(map(str, nums)) + "?"
    return q, str(max(nums)), [str(n) for n in nums]


def mc_number_words(rng):
    n = rng.randint(21, 99)
    while n % 10 == 0 or n % 11 == 0:
        n = rng.randint(21, 99)
    swapped = (n % 10) * 10 + n // 10
    return (f"How is the number {n} written in words?", number_words(n),
            [number_words(swapped), number_words(n + 1), number_words(n - 1)])


def mc_opposite(rng):
    word, ans = rng.choice(OPPOSITES)
    if rng.random() < 0.5:
        word, ans = ans, word
    others = [o for pair in rng.sample(OPPOSITES, 5) for o in pair if o not in (word, ans)]
    return f"What is the opposite of \"{word}\"?", ans, others


def mc_capital(rng):
    country, ans = rng.choice(CAPITALS)
    others = [c for _, c in rng.sample(CAPITALS, 5) if c != ans]
    return f"What is the capital of {country}?", ans, others


def mc_letter_count(rng):
    word = rng.choice(WORDS)
    n = len(word)
    return (f"How many letters are in the word \"{word}\"?", str(n),
            [str(n + 1), str(n - 1), str(n + 2), str(n - 2)])


MC_MAKERS = [mc_addition, mc_subtraction, mc_multiplication, mc_day_after, mc_month_before,
             mc_letter_after, mc_largest, mc_number_words, mc_opposite, mc_capital, mc_letter_count]


def gen_addition(rng):
    a, b = rng.randint(1, 50), rng.randint(1, 50)
    return f"What is {a} + {b}?", str(a + b)


def gen_day_after(rng):
    day = rng.choice(DAYS)
    return f"Which day of the week comes after {day}?", next_in(DAYS, day)


def gen_month_after(rng):
    month = rng.choice(MONTHS)
    return f"Which month comes after {month}?", next_in(MONTHS, month)


def gen_uppercase(rng):
    word = rng.choice(WORDS)
    return f"Write the word \"{word}\" in capital letters.", word.upper()


def gen_capital(rng):
    country, capital = rng.choice(CAPITALS)
    return f"What is the capital of {country}?", capital


def gen_opposite(rng):
    word, ans = rng.choice(OPPOSITES)
    if rng.random() < 0.5:
        word, ans = ans, word
    return f"What is the opposite of \"{word}\"? Answer with one word.", ans


def gen_larger(rng):
    a, b = rng.sample(range(1, 100), 2)
    return f"Which is larger, {a} or {b}?", str(max(a, b))


def gen_first_letter(rng):
    word = rng.choice(WORDS)
    return f"What is the first letter of the word \"{word}\"?", word[0]


GEN_MAKERS = [gen_addition, gen_day_after, gen_month_after, gen_uppercase, gen_capital,
              gen_opposite, gen_larger, gen_first_letter]


# Templates take turns; one whose questions run out (seven days) is skipped.
def make_mc(rng, count):
    rows, seen = [], set()
    for attempt in range(100 * count):
        if len(rows) == count:
            break
        maker = MC_MAKERS[attempt % len(MC_MAKERS)]
        question, answer, distractors = maker(rng)
        if question in seen:
            continue
        seen.add(question)
        choices, index = four_choices(rng, answer, distractors)
        rows.append({"id": len(rows), "kind": maker.__name__[3:], "question": question,
                     "choices": choices, "answer": index})
    assert len(rows) == count
    return rows


def make_gen(rng, count):
    rows, seen = [], set()
    for attempt in range(100 * count):
        if len(rows) == count:
            break
        maker = GEN_MAKERS[attempt % len(GEN_MAKERS)]
        question, answer = maker(rng)
        if question in seen:
            continue
        seen.add(question)
        rows.append({"id": len(rows), "kind": maker.__name__[4:], "question": question,
                     "answer": answer})
    assert len(rows) == count
    return rows


def write_jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def main():
    data = pathlib.Path(__file__).resolve().parent / "data"
    rng = random.Random(SEED)
    write_jsonl(data / "loom_mc.jsonl", make_mc(rng, NUM_MC))
    write_jsonl(data / "loom_gen.jsonl", make_gen(rng, NUM_GEN))


if __name__ == "__main__":
    main()
