"""Write the tutorial's small gsm8k-format dataset (`gsm8k_mini/main/{train,test}-00000-of-00001.parquet`).

Same columns and layout as gsm8k's `main/` config: `question`, and `answer` ending in `#### <number>`.
The problems are the team's own. Run: python -m tutorial.example_math_swarm.make_dataset
"""

from __future__ import annotations

from pathlib import Path

PROBLEMS = [
    ("Tom has 3 boxes with 12 apples each. He eats 5 apples. How many apples are left?", "3*12=36, 36-5=31", 31),
    ("A train travels 60 km per hour for 4 hours. How far does it go?", "60*4=240", 240),
    (
        "Sara buys 7 pens at 3 dollars each and pays with a 50 dollar bill. How much change does she get?",
        "7*3=21, 50-21=29",
        29,
    ),
    ("A garden has 8 rows of 15 tulips. 23 tulips are picked. How many remain?", "8*15=120, 120-23=97", 97),
    ("Lena reads 25 pages a day. How many pages does she read in 2 weeks?", "25*14=350", 350),
    ("A pizza is cut into 8 slices. How many slices are in 9 pizzas?", "9*8=72", 72),
    ("Max saves 45 dollars a month. How much does he save in a year?", "45*12=540", 540),
    (
        "A shop sells 132 cups on Monday and twice as many on Tuesday. How many cups in total?",
        "132*2=264, 132+264=396",
        396,
    ),
    (
        "There are 5 classes with 28 students each. 17 students are absent. How many are present?",
        "5*28=140, 140-17=123",
        123,
    ),
    ("A rope is 96 meters long and is cut into pieces of 8 meters. How many pieces are there?", "96/8=12", 12),
    (
        "Anna has 250 stickers and gives 35 to each of her 4 friends. How many stickers does she keep?",
        "35*4=140, 250-140=110",
        110,
    ),
    ("A bus carries 42 people. How many buses are needed for 378 people?", "378/42=9", 9),
    ("A farmer has 17 cows and 3 times as many sheep. How many animals does he have?", "17*3=51, 17+51=68", 68),
    (
        "Each ticket costs 14 dollars. A family buys 6 tickets and a 9 dollar snack. What do they spend?",
        "14*6=84, 84+9=93",
        93,
    ),
    ("A tank holds 1200 liters. 375 liters are used. How many liters are left?", "1200-375=825", 825),
    ("Ben runs 3 km every morning and 2 km every evening. How far does he run in 30 days?", "3+2=5, 5*30=150", 150),
    ("A book has 12 chapters of 18 pages. How many pages does it have?", "12*18=216", 216),
    (
        "Mia had 64 marbles, lost a quarter of them, then found 9. How many does she have?",
        "64/4=16, 64-16=48, 48+9=57",
        57,
    ),
    ("A bakery makes 144 rolls and packs them in bags of 6. How many bags?", "144/6=24", 24),
    ("Three friends share 87 dollars equally. How much does each get?", "87/3=29", 29),
    ("A car uses 7 liters of fuel per 100 km. How many liters for 900 km?", "900/100=9, 9*7=63", 63),
    ("A school orders 19 boxes of 24 pencils. How many pencils arrive?", "19*24=456", 456),
    ("A cinema has 23 rows of 31 seats. How many seats?", "23*31=713", 713),
    ("Joe earns 18 dollars an hour and works 37 hours. What does he earn?", "18*37=666", 666),
    ("A clock ticks 60 times a minute. How many ticks in 45 minutes?", "60*45=2700", 2700),
    ("A library has 1500 books and lends out 487. How many are on the shelves?", "1500-487=1013", 1013),
    ("Kim plants 11 trees a day for 13 days. How many trees?", "11*13=143", 143),
    ("A box holds 36 eggs. How many boxes for 1008 eggs?", "1008/36=28", 28),
    (
        "Paul has 5 times as many coins as Rita, who has 47. How many coins do they have together?",
        "47*5=235, 235+47=282",
        282,
    ),
    ("A hall has 4 walls, each with 3 windows of 6 panes. How many panes?", "4*3=12, 12*6=72", 72),
    ("Water costs 2 dollars a bottle. How much do 125 bottles cost?", "125*2=250", 250),
    ("A marathon is 42 km. Tim has run 17 km. How many km remain?", "42-17=25", 25),
]


def rows() -> list[dict[str, str]]:
    return [{"question": q, "answer": f"{work}\n#### {n}"} for q, work, n in PROBLEMS]


def main() -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = Path(__file__).resolve().parent / "gsm8k_mini" / "main"
    folder.mkdir(parents=True, exist_ok=True)
    all_rows = rows()
    pq.write_table(pa.Table.from_pylist(all_rows[:26]), folder / "train-00000-of-00001.parquet")
    pq.write_table(pa.Table.from_pylist(all_rows[26:]), folder / "test-00000-of-00001.parquet")
    print(f"wrote {len(all_rows)} problems to {folder}")


if __name__ == "__main__":
    main()
