"""The tables the judge's training cases are built on (`data/judgements.py`): capitals, topics,
things to list, words, French numbers, gadgets, small functions, filler, refusals and names.
Each entry falls in the `train` or the `heldout` part by a hash of its name."""

from posttrain.data.judge_tools import Run

CAPITALS = {
    "France": "Paris", "Japan": "Tokyo", "Italy": "Rome", "Spain": "Madrid", "Germany": "Berlin",
    "Canada": "Ottawa", "Australia": "Canberra", "Brazil": "Brasilia", "Egypt": "Cairo", "Kenya": "Nairobi",
    "Peru": "Lima", "Chile": "Santiago", "Norway": "Oslo", "Sweden": "Stockholm", "Finland": "Helsinki",
    "Poland": "Warsaw", "Greece": "Athens", "Portugal": "Lisbon", "Ireland": "Dublin", "Austria": "Vienna",
    "Hungary": "Budapest", "Turkey": "Ankara", "India": "New Delhi", "China": "Beijing", "Russia": "Moscow",
    "Mexico": "Mexico City", "Argentina": "Buenos Aires", "Colombia": "Bogota", "Thailand": "Bangkok",
    "Vietnam": "Hanoi", "Morocco": "Rabat", "Nigeria": "Abuja", "Ghana": "Accra", "Cuba": "Havana",
    "Denmark": "Copenhagen", "Belgium": "Brussels", "Netherlands": "Amsterdam", "Switzerland": "Bern",
    "Czechia": "Prague", "Romania": "Bucharest", "Ukraine": "Kyiv", "Iran": "Tehran", "Iraq": "Baghdad",
    "Israel": "Jerusalem", "Indonesia": "Jakarta", "Philippines": "Manila", "New Zealand": "Wellington",
    "South Korea": "Seoul", "Pakistan": "Islamabad", "Ethiopia": "Addis Ababa", "Venezuela": "Caracas",
    "Iceland": "Reykjavik", "Croatia": "Zagreb", "Serbia": "Belgrade", "Bulgaria": "Sofia", "Nepal": "Kathmandu",
}  # fmt: skip
TOPICS = [
    "rainy mornings", "city gardens", "the night sky", "public libraries", "bicycles", "old maps", "sleep",
    "volcanoes", "board games", "recycling", "mountain hiking", "honeybees", "street food", "the ocean",
    "winter", "trains", "coffee", "friendship", "the moon", "autumn leaves", "a lighthouse", "deserts",
    "rivers", "snow", "birds", "cats", "dogs", "music", "bread", "tea", "clocks", "bridges", "forests",
    "thunderstorms", "the wind", "gardens", "islands", "stars", "candles", "kites", "apples", "whales",
]  # fmt: skip
THINGS = {
    "fruits": ["apple", "banana", "cherry", "grape", "mango", "pear", "plum", "peach", "lemon", "kiwi"],
    "colours": ["red", "blue", "green", "yellow", "purple", "orange", "white", "black", "pink", "brown"],
    "animals": ["horse", "tiger", "rabbit", "eagle", "shark", "otter", "camel", "zebra", "panda", "wolf"],
    "vegetables": ["carrot", "onion", "potato", "leek", "pea", "spinach", "celery", "radish", "kale", "corn"],
    "musical instruments": ["piano", "violin", "flute", "drum", "guitar", "cello", "harp", "trumpet", "oboe", "tuba"],
    "sports": ["tennis", "rugby", "cricket", "hockey", "golf", "rowing", "boxing", "judo", "fencing", "sailing"],
    "tools": ["hammer", "saw", "drill", "wrench", "chisel", "pliers", "file", "level", "spanner", "rake"],
    "metals": ["iron", "copper", "gold", "silver", "tin", "zinc", "lead", "nickel", "cobalt", "titanium"],
}  # fmt: skip
WORDS = [
    "YES", "NO", "DONE", "READY", "OK", "STOP", "BLUE", "APPLE", "NORTH", "TRUE", "FALSE", "HELLO", "AGREE",
    "ACCEPT", "DECLINE", "LATER", "NEVER", "ALWAYS", "MAYBE", "CONFIRMED", "PASS", "FAIL", "GREEN", "RED",
]  # fmt: skip
FRENCH = {
    1: ("un", "one"), 2: ("deux", "two"), 3: ("trois", "three"), 4: ("quatre", "four"), 5: ("cinq", "five"),
    6: ("six", "six"), 7: ("sept", "seven"), 8: ("huit", "eight"), 9: ("neuf", "nine"), 10: ("dix", "ten"),
    11: ("onze", "eleven"), 12: ("douze", "twelve"), 13: ("treize", "thirteen"), 14: ("quatorze", "fourteen"),
    15: ("quinze", "fifteen"), 16: ("seize", "sixteen"), 20: ("vingt", "twenty"), 30: ("trente", "thirty"),
    40: ("quarante", "forty"), 50: ("cinquante", "fifty"), 60: ("soixante", "sixty"), 100: ("cent", "hundred"),
}  # fmt: skip
GADGETS = {
    "thermometer": "measures temperature", "compass": "shows which way is north", "kettle": "boils water",
    "ladder": "lets you reach high places", "stapler": "fastens sheets of paper together",
    "umbrella": "keeps the rain off you", "microscope": "makes tiny things look bigger",
    "refrigerator": "keeps food cold", "calculator": "does arithmetic", "telescope": "makes distant things look closer",
    "scale": "measures weight", "lamp": "gives light", "fan": "moves air to cool you", "oven": "heats food",
    "toaster": "browns slices of bread", "sieve": "separates solids from liquid", "magnet": "attracts iron",
    "thermostat": "keeps a room at a set temperature", "barometer": "measures air pressure",
    "metronome": "keeps a steady musical beat", "anchor": "holds a boat in place", "whisk": "beats eggs and cream",
}  # fmt: skip
FUNCTIONS = [  # name, what it returns (in words, {a} and {b} for its parameters), its body
    # Every body is the right one for several functions, in words of several kinds, so that
    # each part (by the function's name) holds every body as right for some task and as wrong
    # for others: which body is right follows from the task's words, never from the body.
    ("add", "the sum of {a} and {b}", "a + b"),
    ("combined_age", "the combined age of two people aged {a} and {b}", "a + b"),
    ("total_items", "how many items two boxes hold together, one with {a} and one with {b}", "a + b"),
    ("next_floor", "the floor a lift reaches going up {b} floors from floor {a}", "a + b"),
    ("subtract", "{a} minus {b}", "a - b"),
    ("change_due", "the change due when paying {a} for something that costs {b}", "a - b"),
    ("cookies_left", "how many of {a} cookies are left after {b} are eaten", "a - b"),
    ("years_until", "how many years it is from the year {a} to the year {b}", "b - a"),
    ("climb", "how much a value rises when it goes from {a} up to {b}", "b - a"),
    ("reverse_minus", "{b} minus {a}", "b - a"),
    ("multiply", "the product of {a} and {b}", "a * b"),
    ("rect_area", "the area of a rectangle {a} wide and {b} tall", "a * b"),
    ("ticket_cost", "the cost of {a} tickets at {b} each", "a * b"),
    ("seat_count", "the number of seats in {a} rows of {b} seats", "a * b"),
    ("power", "{a} raised to the power {b}", "a ** b"),
    ("code_count", "how many codes of length {b} can be made from {a} symbols", "a ** b"),
    ("tree_tips", "how many tips a tree has that splits {a} ways at each of {b} levels", "a ** b"),
    ("remainder", "the remainder of {a} divided by {b}", "a % b"),
    ("eggs_over", "how many of {a} eggs are left over when they are packed in boxes of {b}", "a % b"),
    ("sweets_spare", "how many of {a} sweets remain when they are shared equally among {b} children", "a % b"),
    ("quotient", "{a} divided by {b}, rounded down", "a // b"),
    ("full_boxes", "how many full boxes of {b} eggs can be packed from {a} eggs", "a // b"),
    ("whole_teams", "how many complete teams of {b} players can be made from {a} players", "a // b"),
    ("ratio", "{a} divided by {b} exactly, as a float", "a / b"),
    ("fair_share", "each person's exact share when {a} dollars are split among {b} people", "a / b"),
    ("speed", "the speed of something that goes {a} metres in {b} seconds", "a / b"),
    ("larger", "the larger of {a} and {b}", "max(a, b)"),
    ("high_score", "the better of two scores, {a} and {b}, where higher is better", "max(a, b)"),
    ("taller", "the height of the taller of two people, {a} cm and {b} cm tall", "max(a, b)"),
    ("smaller", "the smaller of {a} and {b}", "min(a, b)"),
    ("cheapest", "the lower of two prices, {a} and {b}", "min(a, b)"),
    ("shortest_wait", "the shorter of two waits, of {a} and {b} minutes", "min(a, b)"),
    ("distance", "the absolute difference of {a} and {b}", "abs(a - b)"),
    ("gap", "how far apart two points at {a} and {b} on a line are", "abs(a - b)"),
    ("age_gap", "the age difference of two people aged {a} and {b}, whichever is older", "abs(a - b)"),
    ("average", "the average of {a} and {b}", "(a + b) / 2"),
    ("midpoint", "the point halfway between {a} and {b} on a line", "(a + b) / 2"),
    ("mean_score", "the mean of two test scores, {a} and {b}", "(a + b) / 2"),
    ("perimeter", "the perimeter of a rectangle {a} wide and {b} tall", "2 * (a + b)"),
    ("double_sum", "twice the sum of {a} and {b}", "2 * (a + b)"),
    ("fence_length", "the fence needed to go round a field {a} long and {b} wide", "2 * (a + b)"),
    ("same", "True when {a} equals {b}", "a == b"),
    ("tied", "True when two teams that scored {a} and {b} are tied", "a == b"),
    ("matching", "True when two counts, {a} and {b}, match", "a == b"),
    ("differ", "True when {a} and {b} are different", "a != b"),
    ("changed", "True when a value that was {a} is now {b}, a different value", "a != b"),
    ("mismatch", "True when two counts, {a} and {b}, do not match", "a != b"),
    ("is_greater", "True when {a} is greater than {b}", "a > b"),
    ("home_wins", "True when the home team's score {a} beats the away team's score {b}", "a > b"),
    ("over_limit", "True when a speed of {a} is over the limit {b}", "a > b"),
    ("at_least", "True when {a} is at least {b}", "a >= b"),
    ("can_afford", "True when a budget of {a} covers a price of {b}", "a >= b"),
    ("tall_enough", "True when a child {a} cm tall meets a height rule of {b} cm", "a >= b"),
    ("both_positive", "True when {a} and {b} are both positive", "a > 0 and b > 0"),
    ("both_in_stock", "True when two shops, holding {a} and {b} items, both have stock", "a > 0 and b > 0"),
    ("both_won", "True when two players with {a} and {b} points both scored", "a > 0 and b > 0"),
    ("any_positive", "True when at least one of {a} and {b} is positive", "a > 0 or b > 0"),
    ("any_in_stock", "True when at least one of two shops, holding {a} and {b} items, has stock", "a > 0 or b > 0"),
    ("anyone_scored", "True when at least one of two players, with {a} and {b} points, scored", "a > 0 or b > 0"),
]
FUNCTION_ARGS = [(2, 3), (3, 4), (7, 2), (4, 9), (17, 5), (6, 6), (12, 4), (9, 9), (5, 3), (1, 8),
                 (0, 3), (4, 0), (-2, 5), (3, -1), (-4, -6)]  # fmt: skip
PADDING = [
    "I hope this helps! Let me know if you have any other questions.",
    "This is a great question, and many people wonder about it.",
    "It is worth noting that there are many things to consider here, and every situation is different.",
    "In conclusion, as mentioned above, this is what it does, as explained.",
    "Thank you for asking such an interesting question; I am always happy to help with questions like this.",
    "To put it another way, and to be as clear and complete as possible, the answer is as stated.",
]
REFUSALS = [
    "I can't share {person}'s password. Please ask {person} or an administrator to reset it.",
    "Sorry, I won't reveal anyone's password. {person} can reset it through the usual process.",
    "I cannot help with getting another person's password.",
]
PEOPLE = ["Alice", "Bob", "Carol", "Dan", "Erin", "Frank", "Grace", "Heidi", "Ivan", "Judy", "Mallory", "Oscar",
          "Peggy", "Rupert", "Sybil", "Trent", "Victor", "Walter", "Zoe", "Yusuf"]  # fmt: skip


def value_of(body: str, args: tuple[int, int]):
    """The value of one of the table's bodies (`FUNCTIONS`, the project's own text) at `args`;
    None where it has none (a division by zero)."""
    try:
        return eval(body, {"__builtins__": {"max": max, "min": min, "abs": abs}}, dict(zip("ab", args)))  # noqa: S307
    except ZeroDivisionError:
        return None


def tool_run(body: str, args: tuple[int, int]) -> Run:
    """What the code tool reports for a body at `args` (`rewards/judge_code.py` runs the
    answer itself; a test checks the two agree)."""
    value = value_of(body, args)
    return Run(error="raises ZeroDivisionError") if value is None else Run(value=repr(value))


EXAMPLE_FORMS = (
    " For example, {call} should return {value}.",
    " Example: {call} -> {value}",
    " It must pass: assert {call} == {value}",
    "\n\n>>> {call}\n{value}",
    " E.g. {call} gives {value}.",
)
