"""The tables the judge's training cases are built on (`data/judgements.py`): capitals, topics,
things to list, words, French numbers, gadgets, small functions, filler, refusals and names.
Each entry falls in the `train` or the `heldout` part by a hash of its name."""

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
FUNCTIONS = [  # name, what it returns (in words), the right body, a wrong body, a test call and its value
    ("add", "the sum of a and b", "a + b", "a - b", (2, 3), 5),
    ("multiply", "the product of a and b", "a * b", "a + b", (3, 4), 12),
    ("difference", "a minus b", "a - b", "b - a", (7, 2), 5),
    ("larger", "the larger of a and b", "max(a, b)", "min(a, b)", (4, 9), 9),
    ("smaller", "the smaller of a and b", "min(a, b)", "max(a, b)", (4, 9), 4),
    ("average", "the average of a and b", "(a + b) / 2", "a + b / 2", (2, 4), 3),
    ("power", "a raised to the power b", "a ** b", "a * b", (2, 5), 32),
    ("remainder", "the remainder of a divided by b", "a % b", "a // b", (17, 5), 2),
    ("quotient", "a divided by b, rounded down", "a // b", "a % b", (17, 5), 3),
    ("distance", "the absolute difference of a and b", "abs(a - b)", "a - b", (3, 8), 5),
    ("same", "True when a equals b", "a == b", "a != b", (3, 3), True),
    ("both_positive", "True when a and b are both positive", "a > 0 and b > 0", "a > 0 or b > 0", (1, -1), False),
]  # fmt: skip
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
